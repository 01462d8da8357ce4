"""WRONG on purpose: scales the input in place to save a copy (caught by ``purity``).

The results are right (the scaling is undone exactly), but the caller's ``x`` is
left doubled: a caller reusing ``x`` for the next layer gets wrong numbers.
"""

from numpy_qkv import backward, validate  # noqa: F401 - the reverse pass is right


def forward(x, w_query, w_key, w_value):
    validate(x, w_query, w_key, w_value)
    x *= 2.0  # in place: the caller's array changes
    return tuple((x @ w) / 2.0 for w in (w_query, w_key, w_value))

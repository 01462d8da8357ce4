"""WRONG on purpose: a forward without validation (caught by ``errors``).

``x @ w`` happily projects a rank-2 ``[tokens, d_model]`` input and weights of
different head widths, silently losing the batch axis or mixing head sizes.
"""

from numpy_qkv import backward  # noqa: F401 - the reverse pass is right


def forward(x, w_query, w_key, w_value):
    return x @ w_query, x @ w_key, x @ w_value

"""WRONG on purpose: K is computed with W_Q (caught by ``forward``: "key equals X W_Q").

A copy-paste slip: the key branch reuses the query weight.
"""

from numpy_qkv import backward, validate  # noqa: F401 - the reverse pass is right


def forward(x, w_query, w_key, w_value):
    validate(x, w_query, w_key, w_value)
    return x @ w_query, x @ w_query, x @ w_value  # key should be x @ w_key

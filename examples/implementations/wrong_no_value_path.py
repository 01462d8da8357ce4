"""WRONG on purpose: dX forgets the value path (caught by ``reverse``: "grad_input misses the value path").

dX must add all three paths, dQ W_Q^T + dK W_K^T + dV W_V^T; this one stops after two.
"""

from numpy_qkv import forward, validate  # noqa: F401 - the forward is right


def backward(x, w_query, w_key, w_value, grad_query, grad_key, grad_value):
    batch, tokens, d_model, d_head = validate(x, w_query, w_key, w_value)
    grad_input = grad_query @ w_query.T + grad_key @ w_key.T  # the value path is missing
    rows = x.reshape(batch * tokens, d_model)

    def branch(g):
        return rows.T @ g.reshape(batch * tokens, d_head)

    return grad_input, branch(grad_query), branch(grad_key), branch(grad_value)

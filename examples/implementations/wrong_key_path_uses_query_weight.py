"""WRONG on purpose: dX sends the key path back through W_Q (caught by ``reverse``:
"grad_input's key path uses W_Q instead of W_K").

dX must add dQ W_Q^T + dK W_K^T + dV W_V^T; this one computes dK W_Q^T for the key path,
a copy-paste slip that the forward (and every weight gradient) never shows.
"""

from numpy_qkv import forward, validate  # noqa: F401 - the forward is right


def backward(x, w_query, w_key, w_value, grad_query, grad_key, grad_value):
    batch, tokens, d_model, d_head = validate(x, w_query, w_key, w_value)
    grad_input = grad_query @ w_query.T + grad_key @ w_query.T + grad_value @ w_value.T  # W_Q twice
    rows = x.reshape(batch * tokens, d_model)

    def branch(g):
        return rows.T @ g.reshape(batch * tokens, d_head)

    return grad_input, branch(grad_query), branch(grad_key), branch(grad_value)

"""A correct Q/K/V projection in NumPy: check it with ``qkv check examples/implementations/numpy_qkv.py``.

Forward: ``Q = X W_Q``, ``K = X W_K``, ``V = X W_V`` over the last axis of a
``[batch, tokens, d_model]`` input. Reverse: the shared input adds all three paths,
``dX = dQ W_Q^T + dK W_K^T + dV W_V^T``, while each ``dW = X^T dY`` stays branch-local.
``BUG`` switches on one slip on purpose (``wrong_float32.py``, ``wrong_no_value_path.py``,
``wrong_key_path_uses_query_weight.py`` and the ``wrong_projections_*.py`` examples set
it); ``""`` is correct.
"""

BUG = ""


def validate(x, w_query, w_key, w_value):
    """Raise ValueError for shapes the chapter rejects; return (batch, tokens, d_model, d_head)."""
    if x.ndim != 3:
        raise ValueError(f"input must have rank 3 [batch, tokens, d_model], got rank {x.ndim}")
    for name, w in (("query", w_query), ("key", w_key), ("value", w_value)):
        if w.ndim != 2:
            raise ValueError(f"{name} weight must have rank 2, got rank {w.ndim}")
    if not w_query.shape[0] == w_key.shape[0] == w_value.shape[0]:
        raise ValueError("Q/K/V model widths must match")
    if not w_query.shape[1] == w_key.shape[1] == w_value.shape[1]:
        raise ValueError("Q/K/V head widths must match")
    batch, tokens, d_model = x.shape
    if d_model != w_query.shape[0]:
        raise ValueError(f"input width {d_model} must equal model width {w_query.shape[0]}")
    return batch, tokens, d_model, w_query.shape[1]


def forward(x, w_query, w_key, w_value):
    validate(x, w_query, w_key, w_value)
    if BUG == "float32":  # the slip: computed in float32, about 7 significant digits
        x, w_query, w_key, w_value = (a.astype("float32") for a in (x, w_query, w_key, w_value))
    # [B,T,d] @ [d,h] -> [B,T,h], once per branch
    return x @ w_query, x @ w_key, x @ w_value


def backward(x, w_query, w_key, w_value, grad_query, grad_key, grad_value):
    batch, tokens, d_model, d_head = validate(x, w_query, w_key, w_value)
    for name, g in (("query", grad_query), ("key", grad_key), ("value", grad_value)):
        if g.shape != (batch, tokens, d_head):
            raise ValueError(f"{name} upstream gradient has shape {g.shape}")
    if BUG == "float32":  # the slip: computed in float32, about 7 significant digits
        x, w_query, w_key, w_value, grad_query, grad_key, grad_value = (
            a.astype("float32") for a in (x, w_query, w_key, w_value, grad_query, grad_key, grad_value))
    # Three paths add into the shared input: [B,T,h] @ [h,d] -> [B,T,d]
    grad_input = grad_query @ w_query.T + grad_key @ w_key.T + grad_value @ w_value.T
    if BUG == "no-value-path":  # the slip: dX stops after two paths
        grad_input = grad_query @ w_query.T + grad_key @ w_key.T
    if BUG == "key-path-uses-query-weight":  # the slip: the key path goes back through W_Q
        grad_input = grad_query @ w_query.T + grad_key @ w_query.T + grad_value @ w_value.T
    rows = x.reshape(batch * tokens, d_model)  # X_(BT): [BT,d]

    def branch(g):
        return rows.T @ g.reshape(batch * tokens, d_head)  # [d,BT] @ [BT,h] -> [d,h]

    grad_w = [branch(grad_query), branch(grad_key), branch(grad_value)]
    if BUG == "dw-mean":  # the slip: a mean over the B*T rows, not their sum
        grad_w = [g / max(batch * tokens, 1) for g in grad_w]
    if BUG == "dwq-transposed":  # the slip: dQ^T X, [h,d] instead of [d,h]
        grad_w[0] = grad_query.reshape(batch * tokens, d_head).T @ rows
    return (grad_input, *grad_w)

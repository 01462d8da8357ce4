"""RoPE (chapter 29) and multi-head attention (chapter 30) in NumPy, correct.

    qkv check examples/implementations/numpy_rope_mha.py

``rope(x, base, offset) -> rotated`` turns each adjacent pair ``(2i, 2i+1)`` of the last
axis at token ``t`` by ``(offset + t) * base^(-2i/d)``; ``rope_reverse(rotated, base,
offset)`` turns it back. ``mha_forward(x, w_query, w_key, w_value, w_output, heads,
causal, rope, base, offset) -> (weights [B,H,T,T], merged [B,T,d], output [B,T,d])`` and
``mha_backward(..., grad_output)`` gives ``(grad_input, grad_w_query, grad_w_key,
grad_w_value, grad_w_output)``. ``BUG`` switches on one slip on purpose (the
``wrong_rope_*.py`` and ``wrong_mha_*.py`` examples set it); ``""`` is correct.
"""

import math

import numpy as np

BUG = ""


def _angles(tokens, width, base, offset):
    if width == 0 or width % 2:
        raise ValueError(f"RoPE needs an even, non-zero width, got {width}")
    if not (math.isfinite(base) and base > 0):
        raise ValueError(f"RoPE needs a positive base, got {base}")
    if offset < 0:
        raise ValueError(f"RoPE needs an offset of 0 or more, got {offset}")
    first = {"from-one": offset + 1, "offset-ignored": 0}.get(BUG, offset)
    base = {"base-ignored": 10000.0, "base-squared": base ** 2}.get(BUG, base)
    kind = np.float32 if BUG == "float32-angles" else np.float64
    positions = np.arange(first, first + tokens, dtype=kind)
    frequencies = 1.0 / kind(base) ** (np.arange(0, width, 2, dtype=kind) / kind(width))
    angles = positions[:, None] * frequencies[None, :]  # [T, d/2]
    return np.radians(angles) if BUG == "degrees" else angles  # the slip: radians read as degrees


def _turn(x, base, offset, sign):
    if x.ndim < 2:
        raise ValueError(f"RoPE needs [..., tokens, width], got shape {x.shape}")
    along = 0 if BUG == "batch-positions" else -2  # the slip: positions along the batch axis
    angles = _angles(x.shape[along], x.shape[-1], base, offset)
    if BUG == "batch-positions":  # [B, 1, ..., d/2]: every token of item b turned by offset + b
        angles = angles.reshape(x.shape[0], *[1] * (x.ndim - 2), x.shape[-1] // 2)
    cos, sin = np.cos(angles), sign * np.sin(angles)
    if BUG == "cos-sin-swapped":
        cos, sin = np.sin(angles), sign * np.cos(angles)
    cos, sin = cos.astype(np.float64), sin.astype(np.float64)
    if BUG == "half-split":
        half = x.shape[-1] // 2
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)
    a, b = x[..., 0::2], x[..., 1::2]  # the adjacent pairs
    out = np.empty(x.shape)
    out[..., 0::2] = a * cos - b * sin
    out[..., 1::2] = b * cos + a * sin
    return out


def rope(x, base, offset):
    return _turn(x, base, offset, 1.0)


def rope_reverse(rotated, base, offset):
    return _turn(rotated, base, offset, 1.0 if BUG == "not-inverted" else -1.0)


def _split(y, heads):  # [B,T,d] -> [B,H,T,d_h]
    batch, tokens, width = y.shape
    if BUG == "split-no-transpose":
        return y.reshape(batch, heads, tokens, width // heads)
    if BUG == "strided-heads":  # head h gets the columns h, h + H, h + 2H, ...
        return y.reshape(batch, tokens, width // heads, heads).transpose(0, 3, 1, 2)
    return y.reshape(batch, tokens, heads, width // heads).transpose(0, 2, 1, 3)


def _merge(y):  # [B,H,T,d_h] -> [B,T,d]
    batch, heads, tokens, size = y.shape
    if BUG in ("split-no-transpose", "merge-no-transpose"):
        return y.reshape(batch, tokens, heads * size)
    if BUG == "strided-heads":
        return y.transpose(0, 2, 3, 1).reshape(batch, tokens, heads * size)
    return y.transpose(0, 2, 1, 3).reshape(batch, tokens, heads * size)


def _softmax(scores):  # each query's row, or (one-softmax) its row across every head
    if not scores.size:
        return np.zeros(scores.shape)
    joint = BUG == "one-softmax"
    if joint:
        batch, heads, tokens, _ = scores.shape
        scores = scores.transpose(0, 2, 1, 3).reshape(batch, tokens, heads * tokens)
    e = np.exp(scores - np.max(scores, axis=-1, keepdims=True))
    weights = e / np.sum(e, axis=-1, keepdims=True)
    if joint:
        weights = weights.reshape(batch, tokens, heads, tokens).transpose(0, 2, 1, 3)
    return weights


def _softmax_reverse(a, grad_a):
    if BUG != "one-softmax":
        return a * (grad_a - np.sum(grad_a * a, axis=-1, keepdims=True))
    batch, heads, tokens, _ = a.shape
    a_j, g_j = (t.transpose(0, 2, 1, 3).reshape(batch, tokens, heads * tokens) for t in (a, grad_a))
    grad = a_j * (g_j - np.sum(g_j * a_j, axis=-1, keepdims=True))
    return grad.reshape(batch, tokens, heads, tokens).transpose(0, 2, 1, 3)


def _validate(x, w_query, w_key, w_value, w_output, heads, rope_on):
    if x.ndim != 3:
        raise ValueError(f"input must be [batch, tokens, d_model], got {x.shape}")
    width = x.shape[2]
    for w in (w_query, w_key, w_value, w_output):
        if w.shape != (width, width):
            raise ValueError(f"weights must be [{width},{width}], got {w.shape}")
    if heads < 1 or width % heads:
        raise ValueError(f"{heads} heads do not divide d_model {width}")
    if rope_on and (width // heads) % 2:
        raise ValueError(f"RoPE needs an even head width, got {width // heads}")


def _forward(x, w_query, w_key, w_value, w_output, heads, causal, rope_on, base, offset,
             forward=False):
    _validate(x, w_query, w_key, w_value, w_output, heads, rope_on)
    slip = BUG if forward else ""  # a slip of the forward alone; the backward's pass is right
    q, k, v = (x @ w for w in (w_query, w_key, w_value))
    if rope_on and slip == "rope-before-split":  # turned across d_model, then split
        q, k = rope(q, base, offset), rope(k, base, offset)
    q, k, v = (_split(t, heads) for t in (q, k, v))
    if rope_on and slip != "rope-before-split":
        q = rope(q, base, offset)
        k = k if slip == "rope-query-only" or BUG == "rope-value-not-key" else rope(
            k, base, offset)
        if BUG in ("rope-on-value", "rope-value-not-key"):  # V turned (where K should be)
            v = rope(v, base, offset)
    size = x.shape[2] // heads
    scores = q @ np.swapaxes(k, -1, -2)  # [B,H,T,T]
    if BUG != "scale-after-softmax":  # the slip: softmax(Q K^T) / sqrt(d_h)
        scores = scores / _scale(size)
    tokens = x.shape[1]
    if causal and slip != "mask-after-softmax":  # the slip: the later keys zeroed after it
        first = 0 if slip == "diagonal-nan" else 1  # the slip: k=0 hides the diagonal too
        future = np.triu(np.ones((tokens, tokens), dtype=bool), k=first)
        if BUG == "mask-one-head":
            future = np.zeros((heads, tokens, tokens), dtype=bool) | future
            future[1:] = False
        scores = np.where(future, -np.inf, scores)
    if slip == "softmax-over-heads":  # each key's column normalised across the heads
        with np.errstate(invalid="ignore"):  # a key every head masks: -inf - -inf
            e = np.exp(scores - np.max(scores, axis=1, keepdims=True))
            weights = e / np.sum(e, axis=1, keepdims=True)
    else:
        with np.errstate(invalid="ignore"):  # diagonal-nan: -inf - -inf on query 0's row
            weights = _softmax(scores)
    if causal and slip == "mask-after-softmax":
        weights = np.where(np.triu(np.ones((tokens, tokens), dtype=bool), k=1), 0.0, weights)
    if BUG == "scale-after-softmax":
        weights = weights / _scale(size)
    mixed = weights  # the slip: the weights returned are masked, the mixture's are not
    if causal and BUG == "output-unmasked":
        mixed = _softmax(q @ np.swapaxes(k, -1, -2) / _scale(size))
    heads_out = mixed @ v  # [B,H,T,d_h]
    if BUG == "wo-before-merge":  # each head through its own block of W_O, then merged
        blocks = [heads_out[:, h] @ w_output[h * size:(h + 1) * size, h * size:(h + 1) * size]
                  for h in range(heads)]
        merged = np.concatenate(blocks, axis=-1) if blocks else np.zeros(x.shape)
        return q, k, v, weights, heads_out, merged, merged
    merged = _merge(heads_out[:, ::-1] if BUG == "merge-reversed" else heads_out)
    if slip == "merge-strided":  # the slip: column j h of the merge is head h's column j
        merged = heads_out.transpose(0, 2, 3, 1).reshape(x.shape[0], tokens, heads * size)
    output = merged if slip == "no-output-projection" else merged @ w_output
    return q, k, v, weights, heads_out, merged, output


def _scale(size):
    return 1.0 if BUG == "unscaled" else math.sqrt(size)


def mha_forward(x, w_query, w_key, w_value, w_output, heads, causal, rope_on, base, offset):
    *_, weights, _, merged, output = _forward(x, w_query, w_key, w_value, w_output, heads,
                                              causal, rope_on, base, offset, forward=True)
    return weights, merged, output


def mha_backward(x, w_query, w_key, w_value, w_output, heads, causal, rope_on, base, offset,
                 grad_output):
    masked = causal and BUG != "backward-no-mask"  # the slip: weights made again unmasked
    q, k, v, a, _, merged, _ = _forward(x, w_query, w_key, w_value, w_output, heads, masked,
                                        rope_on, base, offset)
    if grad_output.shape != x.shape:
        raise ValueError(f"grad_output has shape {grad_output.shape}")
    width = x.shape[2]
    size = width // heads
    items = slice(0, 1) if BUG == "dw-first-item" else slice(None)  # weights from one item
    mixed = x if BUG == "dwo-from-input" else merged  # the slip: dW_O = X^T dY, not C^T dY
    grad_w_output = (mixed[items].reshape(-1, width).T
                     @ grad_output[items].reshape(-1, width))
    if BUG == "dwo-transposed":
        grad_w_output = grad_w_output.T
    grad_heads = _split(grad_output @ w_output.T, heads)  # dC split per head
    if BUG == "split-back-reshaped":  # the slip: [B,T,d] read as [B,H,T,d_h], no transpose
        grad_heads = (grad_output @ w_output.T).reshape(x.shape[0], heads, x.shape[1], size)
    if BUG == "merge-reversed":
        grad_heads = grad_heads[:, ::-1]
    grad_a = grad_heads @ np.swapaxes(v, -1, -2)
    grad_v = ((a if BUG == "dv-uses-a" else np.swapaxes(a, -1, -2))
              @ (_split(grad_output, heads) if BUG == "dv-without-wo" else grad_heads))
    grad_s = _softmax_reverse(a, grad_a) / (1.0 if BUG == "backward-unscaled" else _scale(size))
    grad_q, grad_k = grad_s @ k, np.swapaxes(grad_s, -1, -2) @ q
    if rope_on and BUG != "rope-backward-ignored":  # the rotation's reverse carries it back
        if BUG == "rope-value-not-key":  # V turned back where K should be
            grad_q, grad_v = rope_reverse(grad_q, base, offset), rope_reverse(grad_v, base, offset)
        else:
            grad_q, grad_k = (rope_reverse(grad_q, base, offset),
                              rope_reverse(grad_k, base, offset))
        if BUG == "rope-on-value":
            grad_v = rope_reverse(grad_v, base, offset)
    grads = [_merge(g) for g in (grad_q, grad_k, grad_v)]
    rows = x[items].reshape(-1, width)
    paths = grads
    if BUG == "dx-last-head":  # each head's dX overwrites the last: the last head's alone
        last = (np.arange(heads) == heads - 1)[:, None, None]
        paths = [_merge(g * last) for g in (grad_q, grad_k, grad_v)]
    if BUG == "no-key-path":
        paths = [paths[0], np.zeros_like(paths[1]), paths[2]]
    weights = (w_query, w_key, w_value)
    if BUG == "no-value-path":
        paths, weights = paths[:2], weights[:2]
    if BUG == "dx-through-wq":  # (dQ + dK + dV) W_Q^T: one weight for all three paths
        paths, weights = [paths[0] + paths[1] + paths[2]], (w_query,)
    untransposed = BUG == "dx-untransposed"  # the slip: g W where the reverse of X W is g W^T
    grad_input = sum(g @ (w if untransposed else w.T)
                     for g, w in zip(paths, weights, strict=True))
    if BUG == "dw-one-item":  # dW_Q, dW_K, dW_V from batch item 0 alone; dW_O summed
        rows, grads = x[:1].reshape(-1, width), [g[:1] for g in grads]
    grad_w = [rows.T @ g[items].reshape(-1, width) for g in grads]
    if BUG == "dwq-transposed":
        grad_w[0] = grad_w[0].T
    return (grad_input + np.zeros_like(x), *grad_w, grad_w_output)

"""A KV cache for one multi-head layer (chapter 37, incremental attention) in NumPy, correct.

    qkv check examples/implementations/numpy_kv_cache.py

``cache_steps(x, w_query, w_key, w_value, w_output, heads, base, capacity, step) ->
(output [B,T,d], keys [B,H,L,d_h], values [B,H,L,d_h], lengths [steps])``: the layer's
cache (``capacity`` positions) is reset, then fed ``step`` tokens of ``x`` at a time.
Each step projects its one token, turns Q and K by RoPE (adjacent pairs) at the cache's
length, attends over the cached keys and its own, writes its output row, and only then
appends its turned key and unturned value. A step the cache refuses (more than one
token, the cache full, or a score that is not finite) raises inside; the run catches it,
writes zeros for its rows and goes on, the cache as it was. ``BUG`` switches on one slip on purpose (the
``wrong_cache_*.py`` examples set it); ``""`` is correct.
"""

import math

import numpy as np

BUG = ""


class CacheRefusal(ValueError):
    """A step the cache refuses; the cache is left as it was."""


def _turn(x, base, position):  # x [B,H,1,d_h] turned at one absolute position
    width = x.shape[-1]
    angle = position * base ** (-np.arange(0, width, 2) / width)
    cos, sin = np.cos(angle), np.sin(angle)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty(x.shape)
    out[..., 0::2] = a * cos - b * sin
    out[..., 1::2] = b * cos + a * sin
    return out


class KvCache:
    def __init__(self, batch, heads, size, capacity):
        self.keys = np.zeros((batch, heads, capacity, size))
        self.values = np.zeros((batch, heads, capacity, size))
        self.capacity = capacity
        self.length = 0

    def reset(self):
        if BUG != "no-reset":
            self.length = 0

    def step(self, token, layer):
        w_query, w_key, w_value, w_output, heads, base = layer
        if token.shape[1] != 1:
            raise CacheRefusal(f"a step takes exactly one token, got {token.shape[1]}")
        if BUG == "append-before-check":
            self.length += 1  # the slip: counted before the check, so a refusal keeps it
            if self.length > self.capacity:
                raise CacheRefusal(f"the cache is full at capacity {self.capacity}")
            self.length -= 1
        elif self.length == self.capacity:
            raise CacheRefusal(f"the cache is full at capacity {self.capacity}")
        batch, _, width = token.shape
        size = width // heads
        q, k, v = ((token @ w).reshape(batch, 1, heads, size).transpose(0, 2, 1, 3)
                   for w in (w_query, w_key, w_value))
        position = {"rope-at-zero": 0, "positions-from-one": self.length + 1}.get(
            BUG, self.length)
        q, k = _turn(q, base, position), _turn(k, base, position)
        if BUG == "values-turned":
            v = _turn(v, base, position)
        at = self.length
        keys = np.concatenate([self.keys[:, :, :at], k], axis=2)
        values = np.concatenate([self.values[:, :, :at], v], axis=2)
        if BUG == "own-key-out" and at:  # the slip: the cache before this step alone
            keys, values = self.keys[:, :, :at], self.values[:, :, :at]
        scale = math.sqrt(width if BUG == "scale-dmodel" else size)
        with np.errstate(over="ignore", invalid="ignore"):
            scores = q @ np.swapaxes(keys, -1, -2) / scale  # [B,H,1,at+1]
        if not np.all(np.isfinite(scores)):
            raise CacheRefusal("a score the softmax cannot read")
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        mixed = (e / e.sum(axis=-1, keepdims=True)) @ values  # [B,H,1,d_h]
        out = mixed.transpose(0, 2, 1, 3).reshape(batch, 1, width) @ w_output
        self.keys[:, :, at] = (q if BUG == "query-cached" else k)[:, :, 0]
        self.values[:, :, at] = v[:, :, 0]
        self.length = at + 1
        return out


_cache = {}  # one cache per layer shape, kept across runs and reset at the start of each


def cache_steps(x, w_query, w_key, w_value, w_output, heads, base, capacity, step):
    if x.ndim != 3 or heads < 1 or x.shape[2] % heads or (x.shape[2] // heads) % 2:
        raise ValueError(f"input {x.shape} with {heads} heads: need [B,T,d], even head width")
    if capacity < 1 or step < 1:
        raise ValueError(f"capacity and step must be at least 1, got {capacity} and {step}")
    if any(w.shape != (x.shape[2], x.shape[2]) for w in (w_query, w_key, w_value, w_output)):
        raise ValueError(f"weights must be [{x.shape[2]},{x.shape[2]}] for input {x.shape}")
    batch, tokens, width = x.shape
    shape = (batch, heads, width // heads, capacity)
    if shape not in _cache:
        _cache[shape] = KvCache(batch, heads, width // heads, capacity)
    cache = _cache[shape]
    cache.reset()
    layer = (w_query, w_key, w_value, w_output, heads, base)
    output, lengths = np.zeros((batch, tokens, w_output.shape[1])), []
    for start in range(0, tokens, step):
        try:
            output[:, start:start + step] = cache.step(x[:, start:start + step], layer)
        except CacheRefusal:
            pass  # refused: its rows stay zeros, the cache as it was
        lengths.append(cache.length)
    n = cache.length
    return output, cache.keys[:, :, :n].copy(), cache.values[:, :, :n].copy(), np.array(lengths)

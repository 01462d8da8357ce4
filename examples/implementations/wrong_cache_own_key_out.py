"""A KV cache wrong on purpose: each step attends to the cached (earlier) keys alone,
leaving its own key and value out; the first step, with an empty cache, reads its own.

    qkv check examples/implementations/wrong_cache_own_key_out.py

The cache is still appended after each step, so the keys and values it holds are right;
every output after the first is not. The rest is numpy_kv_cache's, right.
"""

import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_kv_cache
from numpy_kv_cache import CacheRefusal, _turn


class EarlierKeysOnly(numpy_kv_cache.KvCache):
    def step(self, token, layer):
        w_query, w_key, w_value, w_output, heads, base = layer
        if token.shape[1] != 1:
            raise CacheRefusal(f"a step takes exactly one token, got {token.shape[1]}")
        if self.length == self.capacity:
            raise CacheRefusal(f"the cache is full at capacity {self.capacity}")
        batch, _, width = token.shape
        size = width // heads
        q, k, v = ((token @ w).reshape(batch, 1, heads, size).transpose(0, 2, 1, 3)
                   for w in (w_query, w_key, w_value))
        at = self.length
        q, k = _turn(q, base, at), _turn(k, base, at)
        # the slip: the cache before this step, without the step's own key and value
        keys = self.keys[:, :, :at] if at else k
        values = self.values[:, :, :at] if at else v
        with np.errstate(over="ignore", invalid="ignore"):
            scores = q @ np.swapaxes(keys, -1, -2) / math.sqrt(size)
        if not np.all(np.isfinite(scores)):
            raise CacheRefusal("a score the softmax cannot read")
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        mixed = (e / e.sum(axis=-1, keepdims=True)) @ values  # [B,H,1,d_h]
        out = mixed.transpose(0, 2, 1, 3).reshape(batch, 1, width) @ w_output
        self.keys[:, :, at], self.values[:, :, at] = k[:, :, 0], v[:, :, 0]
        self.length = at + 1
        return out


numpy_kv_cache.KvCache = EarlierKeysOnly
cache_steps = numpy_kv_cache.cache_steps

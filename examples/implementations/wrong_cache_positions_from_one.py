"""A KV cache wrong on purpose: RoPE counts its positions from 1, not 0.

    qkv check examples/implementations/wrong_cache_positions_from_one.py

Each step turns its query and key at the cache's length plus one, so the first token is
turned at position 1. The scores are unchanged (a query and a key turned by the same
extra angle keep their dot product), the outputs right; the cached keys are not. It is
numpy_kv_cache.py with its ``BUG`` switch set to "positions-from-one".
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_kv_cache

numpy_kv_cache.BUG = "positions-from-one"
cache_steps = numpy_kv_cache.cache_steps

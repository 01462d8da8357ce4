"""A KV cache wrong on purpose (rope-at-zero): qkv check names it.

    qkv check examples/implementations/wrong_cache_rope_at_zero.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_kv_cache

numpy_kv_cache.BUG = "rope-at-zero"
cache_steps = numpy_kv_cache.cache_steps

"""A KV cache wrong on purpose (query-cached): qkv check names it.

    qkv check examples/implementations/wrong_cache_query_cached.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_kv_cache

numpy_kv_cache.BUG = "query-cached"
cache_steps = numpy_kv_cache.cache_steps

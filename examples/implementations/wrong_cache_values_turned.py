"""A KV cache wrong on purpose (values-turned): qkv check names it.

    qkv check examples/implementations/wrong_cache_values_turned.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_kv_cache

numpy_kv_cache.BUG = "values-turned"
cache_steps = numpy_kv_cache.cache_steps

"""A KV cache wrong on purpose: each step attends to the cached (earlier) keys alone,
leaving its own key and value out; the first step, with an empty cache, reads its own.

    qkv check examples/implementations/wrong_cache_own_key_out.py

The cache is still appended after each step, so the keys and values it holds are right;
every output after the first is not. It is numpy_kv_cache.py with its ``BUG`` switch set
to "own-key-out".
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_kv_cache

numpy_kv_cache.BUG = "own-key-out"
cache_steps = numpy_kv_cache.cache_steps

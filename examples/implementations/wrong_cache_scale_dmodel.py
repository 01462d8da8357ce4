"""A KV cache wrong on purpose: each step's scores are divided by sqrt(d_model), not by
sqrt(d_h) of its head.

    qkv check examples/implementations/wrong_cache_scale_dmodel.py

The cached keys and values are right; every output after the first step is not (the
first step attends to its own key alone, whatever the scale). It is numpy_kv_cache.py
with its ``BUG`` switch set to "scale-dmodel".
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_kv_cache

numpy_kv_cache.BUG = "scale-dmodel"
cache_steps = numpy_kv_cache.cache_steps

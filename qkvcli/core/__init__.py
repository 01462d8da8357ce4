"""The engine and its vocabulary: the Q/K/V projections' forward and reverse passes, SplitMix64, typed
arrays, the one error hierarchy and the record idiom. Imports nothing else of qkv.
"""

"""What ``qkv init`` writes: starter fixtures with seeded weights, their documents, and fixtures that
reference a checkpoint's tensors.
"""

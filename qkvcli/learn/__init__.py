"""Learning aids: the prediction quiz (``qkv quiz``) and the variance demonstration (``qkv variance``).
"""

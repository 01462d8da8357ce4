"""``qkv check``: the chapter's evidence families run against a user's own Q/K/V implementation."""

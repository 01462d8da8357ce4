"""``qkv check``: every evidence family run against a user's own implementation of the
projections, an attention head, RoPE or multi-head attention (:mod:`qkvcli.check.kinds`)."""

"""The evidence of ``qkv run``: one module per family of the chapter's claims, assembled by
:func:`~qkvcli.evidence.build.build_evidence` into an :class:`~qkvcli.evidence.records.Evidence` record
(plain frozen data: no I/O, no prose).
"""

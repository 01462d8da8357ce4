"""Reading fixtures: strict JSON, the one file reader and its confinement rule, tensor sources
(inline, ``.npy``, generated, ``.safetensors``), weight layouts, limits, and the validated
:class:`~qkvcli.reading.fixture.Fixture` they produce.
"""

"""Reading fixtures: strict JSON, the one file reader and its confinement rule, tensor sources
(inline, ``.npy``, generated, ``.safetensors``), weight layouts, limits, and the validated
:class:`~qkvcli.reading.fixture.Fixture` and :class:`~qkvcli.reading.attend.AttendFixture`
records they produce (plain data: the engine is built from them).
"""

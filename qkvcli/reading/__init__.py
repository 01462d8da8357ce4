"""Reading fixtures: strict JSON, the one file reader and its confinement rule, tensor sources
(inline, ``.npy``, generated, ``.safetensors``), weight layouts, limits, and the
:class:`~qkvcli.reading.fixture.Fixture` and :class:`~qkvcli.reading.attend.AttendFixture`
records a fixture is read into, whole (plain data: the engine is built from them, and
judges an attend fixture's layer as it builds it).
"""

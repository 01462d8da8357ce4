"""Renderers: pure functions from :class:`~qkvcli.checks.evidence.Evidence` to text.

``text`` and ``trace`` follow the reference's report and diagram trace; ``json`` holds
everything, machine-readable. Nothing here prints, reads files or exits.
"""

from __future__ import annotations

FORMATS = ("text", "trace", "json")

"""The one set of display options every rich view takes, and the glyphs it implies.

The figure of ``run``/``report``, ``gradcheck``, ``attend`` and ``variance`` all take a
:class:`RichOptions`. What the *Console* needs (width, colour) is the CLI's business: it
builds the Console inside the command so the environment is honoured, and derives these
options from the same command-line flags (``qkvcli.cli.console.rich_options``).
"""

from __future__ import annotations

from qkvcli.core.record import Record
from qkvcli.core.text import escape_controls


class Symbols(Record):
    """Glyphs that have an ASCII spelling, so an ASCII-only stream never sees Unicode."""

    arrow: str
    ellipsis: str
    tau: str
    dash: str
    worst: str
    times: str
    dot: str
    block: str
    mark: str
    """Beside the worst coordinate's tensor name, on its row (``worst`` explains it below)."""


UNICODE = Symbols(arrow="→", ellipsis="…", tau="τ", dash="—", worst="◀ worst",
                  times="×", dot="·", block="█", mark="◀")  # noqa: RUF001 - the multiplication sign
ASCII = Symbols(arrow="->", ellipsis="...", tau="tau", dash="-", worst="<- worst",
                times="x", dot="-", block="#", mark="<-")


ASCII_MATH = str.maketrans({
    "\u1d40": "^T", "\u03a3": "sum", "\u00d7": "x", "\u00b7": ".", "\u2212": "-",
    "\u221a": "sqrt", "\u2192": "->", "\u2026": "...", "\u03b8": "theta", "\u03c9": "omega",
    "\u2299": "(.)", "\u221e": "inf", "\u2264": "<=", "\u0303": "~"})
"""The glyphs of :data:`~qkvcli.stages.table.STAGES`' formulas, spelled in ASCII."""


class RichOptions(Record):
    """How the rich views show numbers and large tensors.

    ``precision`` is the number of decimals; unless ``full``, a tensor shows at most
    ``max_rows`` rows, ``max_columns`` columns and ``max_batches`` batch items (and a
    gradient check at most ``max_checks`` rows per tensor), the rest replaced by an
    ellipsis and a note; attend's tables of keys show as many keys as the screen holds.
    ``ascii`` spells every glyph in ASCII (the CLI sets it when the output stream cannot
    encode Unicode). ``shading`` is how a heat map shades a weight: ``absolute``
    (against 1: a near-uniform row stays light) or ``row`` (against the largest weight of
    its query row: a row's peak is darkest at any length).
    """

    precision: int = 6
    full: bool = False
    ascii: bool = False
    max_rows: int = 8
    max_columns: int = 6
    max_batches: int = 2
    max_checks: int = 12
    shading: str = "absolute"

    @property
    def symbols(self) -> Symbols:
        """The glyphs this view spells: ASCII when ``ascii``, else Unicode."""
        return ASCII if self.ascii else UNICODE

    def safe(self, text: str) -> str:
        """``text`` as the stream can show it: non-ASCII escaped when ``ascii``."""
        text = escape_controls(text)
        if self.ascii:
            return text.encode("ascii", "backslashreplace").decode("ascii")
        return text

    def math(self, text: str) -> str:
        """A formula or a term's label as the stream can show it: on an ASCII stream its
        mathematical glyphs spelled in ASCII (``ᵀ`` as ``^T``, ``Σ`` as ``sum``)."""
        if self.ascii:
            text = text.translate(ASCII_MATH)
        return self.safe(text)

    def bar(self, fraction: float, width: int) -> str:
        """``fraction`` (clamped to [0, 1]) as ``width`` cells of blocks, then dots."""
        filled = round(max(0.0, min(1.0, fraction)) * width)
        return self.symbols.block * filled + self.symbols.dot * (width - filled)

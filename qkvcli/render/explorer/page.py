"""The explorer page's building blocks: numbers as elements, tensors, heat maps, the page.

A :class:`Page` collects a report's sections as HTML and, for every number, the
derivation its panel opens (:mod:`qkvcli.stages.terms`), and assembles one
self-contained document: ``qkvcli/data/explorer.css`` and ``explorer.js`` inline, the
derivations as one JSON block, a content security policy that forbids every request.
Each number carries the ``data-*`` contract of ``docs/explorer.md``. Tensors are shown
as the terminal shows them (every value up to
:data:`~qkvcli.render.tensors.SUMMARY_THRESHOLD` elements, a summary above); attention
weights as heat maps, numbered up to :data:`~qkvcli.render.rich.heatmap.NUMBERS_UP_TO`
tokens and downsampled above by the terminal's rule.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from html import escape
from typing import Any

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.record import Record
from qkvcli.render.numbers import fmt_float, fmt_scientific, fmt_shape
from qkvcli.render.tensors import shows_values, summarise
from qkvcli.stages.applied import fewer
from qkvcli.stages.table import STAGES
from qkvcli.stages.terms import Derivation, Step, facts

Deriver = Callable[[tuple[int, ...]], Derivation | None]
"""What a tensor's numbers are made of: a derivation per coordinate (``None``: given)."""

PARTS = {"term": "t", "rest": "r", "fact": "f", "text": "x"}
"""How the page's data spells a row's part (:class:`~qkvcli.stages.terms.Step`)."""
BRANCH_WORDS = {"query": "query branch (solid border)", "key": "key branch (dashed border)",
                "value": "value branch (double border)"}
LEVEL_RANGES = ("0", "(0, ¼]", "(¼, ½]", "(½, ¾]", "(¾, 1]")
"""The five shading levels of a heat map, as the terminal's legend names them."""
PAGE_CELLS = 1536
"""Heat-map cells a page holds at most over every batch item and head (a downsampled
map takes fewer blocks when there are many heads): keeps a GPT-2 layer's page small.
Numbered maps over it keep their numbers, their panels without the row's exponentials."""
TOGGLE_UP_TO = 16
"""Tokens up to which ``qkv attend``'s page also draws the weights under the other mask
(when its maps hold at most :data:`PAGE_CELLS` numbered cells)."""
ROW_VALUES = 16
"""Values per row of a 1-D tensor's table."""
GRADCHECK_ROWS = 256
"""Gradient-check rows shown per tensor (the JSON report holds every one)."""
SUMMARY_TERMS = 6
"""Terms a panel of a summarised tensor's value lists (its largest; the rest one row)."""
PAGE_BYTES = 1 << 20
"""The size a page keeps to: the mebibyte attend's page of a GPT-2-small layer at 1,024
tokens stays under (by the caps above). A page of many parts (chapter 37's steps) draws
them while the page stays within it and says which it left out."""
BRIEF_OVER = 512
"""Values of a tensor shown in full above which its values' panels give the stage's
element formula and operands, not each value's terms (a GPT-2 layer's 2,304 bias
gradients, each a sum over 1,024 tokens, would otherwise take megabytes)."""


class PageAsked(Record):
    """What a page is drawn with: ``precision``, the decimals of every number (the
    report's); ``title``, the command (``qkv run``); for ``qkv check``, ``replay`` (a
    failing fixture's label -> the file name ``--save-failures`` gives it), ``spec`` (how
    the command names the implementation) and ``cases`` (the fixtures it was checked on);
    for ``qkv gradcheck``, ``chapter``, the id of the chapter whose gradients it checked,
    which its record does not hold."""

    precision: int
    title: str
    replay: Mapping[str, str]
    spec: str = "IMPL"
    chapter: str = ""
    cases: Sequence[Any] = ()


def shortened(derivation: Derivation | None) -> Derivation | None:
    """``derivation`` with its :data:`SUMMARY_TERMS` largest terms listed, the others
    summed in one row and no indented detail of a term (a summarised tensor's panels)."""
    if derivation is None:
        return None
    found = fewer(derivation, SUMMARY_TERMS)
    return found._replace(rows=tuple(row for row in found.rows
                                     if row.part in ("term", "rest") or row.label[:2] != "  "))


def branch_of(name: str) -> str | None:
    """Which branch a published tensor name belongs to (``query``, ``key``, ``value``)."""
    for branch in ("query", "key", "value"):
        if name.startswith(branch) or name.startswith(f"upstream_{branch}"):
            return branch
    return None


def index_text(index: Iterable[Any]) -> str:
    """A coordinate as ``data-index`` spells it: ``0,1,2``."""
    return ",".join(str(int(i)) for i in index)


class Page:
    """One explorer page being built: its sections, and a derivation per number.

    ``precision``: the decimals of every number (the report's). Build sections with the
    methods below, then :meth:`html` gives the document.
    """

    def __init__(self, title: str, precision: int) -> None:
        self.title = title
        self.precision = precision
        self.sections: list[str] = []
        self.controls: list[str] = []
        self.derivations: dict[str, Any] = {}
        self.labels: dict[str, int] = {}
        self.given: set[str] = set()
        self.operands = True  # list a product term's operand values (not in summaries)
        self.data_bytes = 0  # the derivations' and labels' bytes in the page's JSON block

    # --- numbers -------------------------------------------------------------------

    def fmt(self, value: float | str, scientific: bool = False) -> str:
        """A number as the page writes it: a count (an ``int``) whole, else
        :func:`fmt_float` at the page's precision, or (``scientific``: a table one of
        whose values fixed point would not show) every value of that table in scientific
        notation with as many significant digits."""
        if isinstance(value, str):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)  # a count (a length, rows): whole
        if scientific and math.isfinite(value):
            return fmt_scientific(float(value), self.precision)
        return fmt_float(float(value), self.precision)

    def tiny(self, values: Iterable[float]) -> bool:
        """Whether fixed point at the page's precision would not show one of ``values``
        (a non-zero value it would round to zero): then their table is scientific."""
        flat = np.asarray(list(values) if not isinstance(values, np.ndarray) else values,
                          dtype=np.float64).reshape(-1)
        small = np.abs(flat[np.isfinite(flat)])
        return bool(np.any((small > 0) & (small < 0.5 * 10.0 ** -self.precision)))

    def label(self, text: str) -> int:
        """The number of a shared label (a label used twice is stored once)."""
        if text not in self.labels:
            self.data_bytes += len(json.dumps(text, ensure_ascii=False).encode()) + 1
        return self.labels.setdefault(text, len(self.labels))

    def derive(self, key: str, derivation: Derivation, heading: str = "",
               scientific: bool = False) -> None:
        """Keep ``derivation`` for the number whose ``tensor|index`` is ``key``."""
        if key in self.derivations:
            return
        usual = "term" if derivation.terms_total == "sum" else "fact"
        document: dict[str, Any] = {
            "f": self.label(derivation.formula),
            "r": [self.row(row, usual) for row in derivation.rows],
            "v": self.fmt(derivation.value, scientific),
        }
        if derivation.terms_total != "sum":
            document["s"] = 0  # the rows are facts (their part "f" unless said)
        if heading:
            document["h"] = heading
        if derivation.stage in STAGES:
            stage = STAGES[derivation.stage]
            document["g"] = self.label(f"{stage.name}: {stage.element}; {stage.axes_text()}")
        self.derivations[key] = document
        self.data_bytes += len(key) + len(json.dumps(document, ensure_ascii=False).encode()) + 4

    def size(self, parts: Iterable[str] = ()) -> int:
        """The page's bytes so far with ``parts`` (sections not yet placed) and its assets."""
        html = (*self.sections, *self.controls, *parts)
        return self.data_bytes + sum(len(part.encode()) for part in html) + ASSET_BYTES

    def mark(self) -> tuple[int, int, int, frozenset[str]]:
        """Where the page's data stands, for :meth:`rollback`."""
        return len(self.labels), len(self.derivations), self.data_bytes, frozenset(self.given)

    def rollback(self, mark: tuple[int, int, int, frozenset[str]]) -> None:
        """Forget every label, derivation and given tensor kept since ``mark``."""
        labels, derivations, self.data_bytes, given = mark
        self.labels = dict(list(self.labels.items())[:labels])
        self.derivations = dict(list(self.derivations.items())[:derivations])
        self.given = set(given)

    def row(self, row: Step, usual: str) -> list[Any]:
        """A derivation's row as the page's data: label, value, part (when not the usual),
        and the operands a product multiplies (``a * b``, where the page lists them)."""
        found: list[Any] = [self.label(row.label), self.fmt(row.value)]
        part = PARTS[row.part] if row.part != usual else ""
        if row.operands and self.operands:
            found += [part, " \u00d7 ".join(self.fmt(v) for v in row.operands)]
        elif part:
            found.append(part)
        return found

    def number(self, tensor: str, index: Sequence[int] | str, value: float | str,
               derivation: Derivation | None = None, *, field: str = "", stat: str = "",
               css: str = "", heading: str = "", tag: str = "span",
               variant: str = "", scientific: bool = False) -> str:
        """A number as an element (``tag``) with its ``data-*`` contract, its derivation
        kept. The script makes each one focusable (``tabindex``, ``role=button``).
        ``variant`` tells apart a number of another run than the report's (the other
        mask's weights: ``data-variant``)."""
        where = index if isinstance(index, str) else index_text(index)
        if derivation is not None:
            key = f"{tensor}|{where}" + (f"|{variant}" if variant else "") + (
                f"|{stat}" if stat and not where else "")
            self.derive(key, derivation, heading, scientific)
        extra = (f' data-variant="{variant}"' if variant else "") + (
            f' data-field="{field}"' if field else "") + (
            f' data-stat="{stat}"' if stat else "") + (f' class="{css}"' if css else "")
        return (f'<{tag} data-tensor="{escape(tensor)}" data-index="{where}"{extra}>'
                f"{escape(self.fmt(value, scientific))}</{tag}>")

    # --- tensors -------------------------------------------------------------------

    def tensor(self, name: str, array: Array, derive: Deriver | None = None,
               caption: str = "", given: bool = False,
               axes: Sequence[str] | None = None, summarised: str = "") -> str:
        """A tensor's block: every value in tables (one per value of its leading axes), or
        its summary when it is larger than the terminal shows in full.

        ``axes``: the names of the leading axes that select a table (by default ``batch``
        for a 3-D tensor, ``batch, head`` for a 4-D one); a ``batch`` or ``head`` axis
        follows the page's switch. ``given``: the fixture holds the tensor (its panel says
        so). ``summarised``: why a tensor the terminal would show in full is summarised
        here (the page's budget), in words.
        """
        if given:
            self.given.add(name)
        values = np.asarray(array)
        branch = branch_of(name)
        classes = "tensor" + (f" branch-{branch}" if branch else "")
        title = (f'<h3><code>{escape(name)}</code> <span class="shape">'
                 f'{fmt_shape(values.shape)}</span>'
                 + (f' <span class="branch-word">{BRANCH_WORDS[branch]}</span>' if branch else "")
                 + "</h3>")
        intro = f'<p class="caption">{escape(caption)}</p>' if caption else ""
        if shows_values(values.size, "summary") and not summarised:
            if derive is not None and values.size > BRIEF_OVER:
                self.describe(name, derive(tuple(0 for _ in values.shape)), values.size)
                derive = None
            lead = (("batch", "head")[:max(values.ndim - 2, 0)] if axes is None
                    else tuple(axes))
            body = self.tables(name, values, derive, lead)
        else:
            self.operands = False  # a summary's panels stay small: products alone
            body = self.summary(name, values, None if derive is None
                                else lambda at: shortened(derive(at)), summarised)
            self.operands = True
        return f'<section class="{classes}" data-name="{escape(name)}">{title}{intro}{body}</section>'

    def describe(self, tensor: str, example: Derivation | None, count: int) -> None:
        """One panel for every value of ``tensor``: its stage's element formula and axes
        (from ``example``, the derivation of its first value), its terms not listed."""
        if example is None or example.stage not in STAGES:
            return
        stage = STAGES[example.stage]
        document = {
            "f": self.label(stage.element), "s": 0,
            "r": [[self.label("stage"), f"{stage.name}: {stage.formula}", "x"],
                  [self.label("operands → output"), stage.axes_text(), "x"],
                  [self.label("terms"), f"not listed: this tensor shows {count} values, the "
                   f"page lists the terms of tensors of at most {BRIEF_OVER}", "x"]]}
        self.derivations[f"{tensor}|*"] = document
        self.data_bytes += len(json.dumps(document, ensure_ascii=False).encode()) + len(tensor) + 6

    def tables(self, name: str, values: Array, derive: Deriver | None,
               lead: Sequence[str]) -> str:
        """One table per value of the ``lead`` axes (a ``batch`` or ``head`` one follows
        the page's switch); a tensor of at most two axes is one table."""
        if values.ndim <= 2 or not lead:
            return self.grid(name, values, (), derive)
        parts = []
        for where in np.ndindex(*values.shape[:len(lead)]):
            named = list(zip(lead, where, strict=True))
            attributes = "".join(f' data-{axis}="{i}"' for axis, i in named
                                 if axis in ("batch", "head"))
            label = ", ".join(f"{axis} {i}" for axis, i in named)
            parts.append(f'<div class="slice"{attributes}><p class="slice-name">{label}</p>'
                         + self.grid(name, values[where], where, derive) + "</div>")
        return "".join(parts)

    def grid(self, name: str, matrix: Array, lead: tuple[int, ...],
             derive: Deriver | None) -> str:
        """A table of numbers: a matrix's rows, or a vector's values in rows of
        :data:`ROW_VALUES`, each labelled with its first index."""
        if matrix.ndim == 2:
            heads = [str(c) for c in range(matrix.shape[1])]
            rows = [(r, [((*lead, r, c), matrix[r, c]) for c in range(matrix.shape[1])])
                    for r in range(matrix.shape[0])]
        else:
            flat = matrix.reshape(-1)
            width = min(ROW_VALUES, flat.size)
            heads = [f"+{c}" for c in range(width)]
            rows = [(start, [((i,), flat[i]) for i in range(start, min(start + width, flat.size))])
                    for start in range(0, flat.size, max(width, 1))]
        scientific = self.tiny(matrix)
        body = "".join(
            f'<tr><th scope="row">{label}</th>' + "".join(
                self.number(name, index, float(value),
                            derive(index) if derive is not None else None, tag="td",
                            scientific=scientific) for index, value in cells) + "</tr>"
            for label, cells in rows)
        head = "".join(f'<th scope="col">{c}</th>' for c in heads)
        return (f'<table class="values"><thead><tr><th></th>{head}</tr></thead><tbody>'
                f"{body}</tbody></table>")

    def summary(self, name: str, values: Array, derive: Deriver | None,
                why: str = "") -> str:
        """A large tensor as the terminal summarises it (or for ``why``); its first and
        last values, its minimum and its maximum are numbers at their coordinates."""
        s = summarise(values)
        count = s.count

        def at(flat: int, stat: str = "", value: float | None = None) -> str:
            index = tuple(int(i) for i in np.unravel_index(flat, values.shape))
            return self.number(name, index, float(values[index]) if value is None else value,
                               derive(index) if derive is not None else None, stat=stat)

        first = " ".join(at(flat) for flat in range(min(4, count)))
        last = " ".join(at(flat) for flat in range(max(count - 4, 0), count))
        extremes = ""
        if count:
            for stat, flat, value in (("min", int(np.argmin(values)), s.minimum),
                                      ("max", int(np.argmax(values)), s.maximum)):
                where = index_text(np.unravel_index(flat, values.shape))
                extremes += f"<dt>{stat}</dt><dd>{at(flat, stat, value)} at [{where}]</dd>"
        every = np.asarray(values, dtype=np.float64).reshape(-1)
        total, squares = float(np.sum(every)), float(np.sum(every * every))
        mean = self.number(name, "", s.mean, facts(
            "", f"the sum of the {count} values over their count",
            [("sum of the values", total), ("count", str(count))], s.mean), stat="mean")
        norm = self.number(name, "", s.l2_norm, facts(
            "", f"the square root of the sum of the {count} values' squares",
            [("sum of the squares", squares), ("count", str(count))], s.l2_norm),
            stat="l2_norm")
        why = escape(why or "summarised above 4096, as the terminal does")
        return (f'<dl class="summary"><dt>count</dt><dd>{count} values ({why}; the JSON '
                "report's digest is the same)</dd>"
                f"<dt>first</dt><dd>{first}</dd><dt>last</dt><dd>{last}</dd>{extremes}"
                f"<dt>mean</dt><dd>{mean}</dd><dt>L2 norm</dt><dd>{norm}</dd>"
                f"<dt>sha256</dt><dd><code>{s.sha256}</code></dd></dl>")

    # --- heat maps -----------------------------------------------------------------

    def heatmap(self, name: str, weights: Array, softmax_input: Array | None,
                derive: Callable[[tuple[int, ...], bool], Derivation | None], extra: str = "",
                variant: str = "") -> str:
        """An attention matrix ``[..., T, T]`` as heat maps, one per batch item (and head):
        numbered cells up to ``NUMBERS_UP_TO`` tokens, else the block maxima of a
        downsampled grid. Each cell is shaded against 1 (absolute) and against its row's
        largest (row-relative), with the glyph of its level, so the map reads without
        colour too, and opens ``derive(coordinate, whether it lists its row's
        exponentials)``; a weight 0 whose softmax input is ``-inf`` is masked (struck
        through). ``extra`` marks the maps' wrapper (a causal toggle's ``data-causal``)
        and ``variant`` its numbers.
        """
        from qkvcli.render.rich.heatmap import GRID_ROWS, NUMBERS_UP_TO, block_max, blocks, level

        slices = list(np.ndindex(*weights.shape[:-2]))
        tokens = int(weights.shape[-1])
        hidden = (~np.isfinite(softmax_input) if softmax_input is not None
                  and softmax_input.shape == weights.shape else np.zeros(weights.shape, bool))
        numbered = tokens <= NUMBERS_UP_TO
        # a numbered cell's panel lists its row's exponentials while the page's maps stay
        # within PAGE_CELLS cells; beyond, it gives the row's sum alone, as a block's does
        listed = numbered and len(slices) * tokens * tokens <= PAGE_CELLS
        out = []
        side = max(4, math.isqrt(PAGE_CELLS // max(len(slices), 1)))
        rows = columns = min(tokens, GRID_ROWS, side)
        for where in slices:
            matrix = np.asarray(weights[where], dtype=np.float64)
            attributes = f' data-batch="{where[0]}"' + (
                f' data-head="{where[1]}"' if len(where) > 1 else "")
            caption = ", ".join(f"{axis} {i}" for axis, i in zip(("batch", "head"), where,
                                                                   strict=False))
            note = ""
            if numbered:
                labels = list(range(tokens))
                grid = [[(q, k, float(matrix[q, k])) for k in range(tokens)] for q in labels]
            else:
                block, query_blocks = block_max(matrix, rows, columns)
                labels = [start for start, _ in query_blocks]
                grid = [[(q0 + q, k0 + k, float(value)) for (k0, k1), value in
                         zip(blocks(tokens, columns), values, strict=True)
                         for q, k in [_argmax(matrix[q0:q1, k0:k1])]]
                        for (q0, q1), values in zip(query_blocks, block, strict=True)]
                note = (f'<p class="slice-name">{len(grid)}\u00d7{len(grid[0])} blocks of '
                        f"{tokens}\u00d7{tokens}: each cell is the largest weight of its block "
                        "(equal blocks, floor(i T / n) boundaries; row label: the block's "
                        "first query), at that weight's coordinate</p>")
            body = []
            for label, row in zip(labels, grid, strict=True):
                largest = max(value for _, _, value in row)
                cells = []
                for q, k, value in row:
                    index = (*where, q, k)
                    css = f"w a{level(value, 1.0)} r{level(value, largest)}"
                    derivation = derive(index, listed)
                    if matrix[q, k] == 0.0 and hidden[index]:
                        css += " m"  # masked: struck through, not only blank
                    cells.append(self.number(name, index, value, derivation, css=css,
                                             tag="td", variant=variant))
                body.append(f'<tr><th scope="row">{label}</th>{"".join(cells)}</tr>')
            if numbered:
                keys = "".join(f'<th scope="col">{k}</th>' for k in range(tokens))
                table = f'<table class="heat numbered"><thead><tr><th>q\\k</th>{keys}</tr></thead>'
            else:
                table = '<table class="heat grid">'
            out.append(f'<div class="slice"{attributes}><p class="slice-name">{caption}</p>'
                       f'{note}{table}<tbody>{"".join(body)}</tbody></table></div>')
        return f'<div class="maps"{extra}>' + "".join(out) + "</div>"

    def weights_section(self, caption: str, maps: Iterable[str]) -> None:
        """The attention weights' section (``caption``: its words, HTML), its heat maps
        under the legend of both scales (the shown scale's visible), and the scale's
        switch."""
        self.controls.append(
            '<fieldset class="scale"><legend>heat-map scale</legend>'
            '<label><input type="radio" name="qkv-scale" value="row" checked> row-relative</label>'
            '<label><input type="radio" name="qkv-scale" value="abs"> absolute</label></fieldset>')
        swatches = "".join(f'<span class="swatch"><span class="w a{i} r{i} key-cell"></span>'
                           f'{"" if i else "blank "}{LEVEL_RANGES[i]}</span>' for i in range(5))
        self.sections.append(
            f'<section class="group"><h2>Attention weights</h2><p class="caption">{caption}</p>'
            '<div class="legend" data-scale-for="row"><p>Shading: each weight against the '
            f"largest weight of its row (row-relative).</p>{swatches}</div>"
            '<div class="legend" data-scale-for="abs"><p>Shading: each weight against 1 '
            f"(absolute).</p>{swatches}</div>" + "".join(maps) + "</section>")

    # --- the document --------------------------------------------------------------

    def html(self, heading: str, verdict: str, passed: bool) -> str:
        """The page: header, controls, sections, the derivation panel, data and script."""
        data = json.dumps({"labels": list(self.labels), "given": sorted(self.given),
                           "derivations": self.derivations},
                          ensure_ascii=False, separators=(",", ":"))
        data = data.replace("<", "\\u003c")  # never a closing tag inside the script element
        state = "pass" if passed else "fail"
        return "".join((
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
            '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
            "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">",
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            '<link rel="icon" href="data:,">',
            f"<title>{escape(heading)}</title><style>{asset('explorer.css')}</style></head>",
            '<body data-scale="row">',
            f'<header><h1>{escape(heading)}</h1><p class="verdict {state}">'
            f"{'✔' if passed else '✘'} {escape(verdict)}</p>",
            "<p class=\"hint\">Click a number, or Tab to it and press Enter, to see how it was "
            "made; Escape closes the panel.</p></header>",
            f'<nav class="controls" aria-label="view">{"".join(self.controls)}</nav>',
            '<main>', "".join(self.sections), "</main>",
            '<aside id="qkv-panel" role="region" aria-live="polite" aria-label="derivation" '
            'hidden><button type="button" class="close" aria-label="close">\u00d7</button>'
            '<div id="qkv-panel-body"></div></aside>',
            f'<script type="application/json" id="qkv-data">{data}</script>',
            f"<script>{asset('explorer.js')}</script></body></html>\n",
        ))

    def switch(self, name: str, label: str, options: Sequence[tuple[str, str]]) -> None:
        """A switch of what the page shows (``data-switch``: a batch item, a head, the
        mask), its ``options`` as (value, words), the first shown; none for one option."""
        if len(options) <= 1:
            return
        self.controls.append(f'<label>{label} <select id="qkv-{name}" data-switch="{name}">'
                             + "".join(f'<option value="{value}">{words}</option>'
                                       for value, words in options) + "</select></label>")

    def select(self, name: str, label: str, count: int) -> None:
        """A switch among ``count`` batch items or heads."""
        self.switch(name, label, [(str(i), str(i)) for i in range(count)])


ASSET_BYTES = 16 << 10
"""Room for the page's frame: its inlined styles and script (14 KB) and header."""


def asset(name: str) -> str:
    """A page asset shipped in ``qkvcli/data`` (``explorer.css``, ``explorer.js``)."""
    from importlib.resources import files

    return files("qkvcli.data").joinpath(name).read_text(encoding="utf-8")


def _argmax(block: Array) -> tuple[int, int]:
    """Where ``block``'s largest value is (its first occurrence, row-major)."""
    q, k = np.unravel_index(int(np.argmax(block)), block.shape)
    return int(q), int(k)

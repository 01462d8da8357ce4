"""Chapter 37's explorer page: the KV cache's steps, its work, its reset, refusals and history.

Drawn from the chapter's JSON document: each number is named by its key there
(``steps.0.output``, ``work.full_rows_per_projection``, ``config.capacity``) and opens
its stage's description (:mod:`qkvcli.stages`) applied to its coordinate. The document
holds what each step made, not what it read: :func:`step_operands` takes those operands
from the engine's steps on the fixture again (each token's projections, its query and
key turned at the cache's length, its scores against the cached keys, its merged heads,
and each prefix's causal pass), as chapter 30's page takes its reverse from the engine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from html import escape
from typing import Any

import numpy as np

from qkvcli.core.arrays import Array
from qkvcli.core.record import Record
from qkvcli.render.explorer.checks import checks_section, entries_of
from qkvcli.render.explorer.checks import counted as counted_checks
from qkvcli.render.explorer.derive import each
from qkvcli.render.explorer.document import tensors_of
from qkvcli.render.explorer.page import PAGE_BYTES, Page
from qkvcli.render.wording import verdict
from qkvcli.stages.terms import (
    Derivation,
    attention_weight,
    counted,
    facts,
    largest_difference,
    projection,
    rotation,
    scores,
)

Make = Callable[[tuple[int, ...], float], Derivation]

CACHE_VALUES = 4096
"""Cached keys and values a page shows in full over every step; beyond, the caches
before the last step are summarised (the last one holds every row they hold)."""
NOTE_BYTES = 2 << 10
"""Room for the notes that name the steps a page leaves out."""


class StepOperands(Record):
    """What the steps read, from the engine on the fixture: the input ``[B,T,d_model]``,
    the four weights, each token's key heads before RoPE ``[B,H,T,d_h]``, RoPE's cosines
    and sines ``[T,pairs]``, per step its turned query ``[B,H,1,d_h]``, raw and scaled
    scores ``[B,H,1,P]``, its merged heads and the last row of the causal pass over its
    prefix before ``W_O`` (rows of ``[B,T,H*d_h]``), and the scale."""

    input: Array
    weights: tuple[Array, Array, Array, Array]
    keys: Array
    cos: Array
    sin: Array
    queries: tuple[Array, ...]
    raw: tuple[Array, ...]
    scaled: tuple[Array, ...]
    merged: Array
    full_merged: Array
    factor: float


def step_operands(fixture: Any, steps: Sequence[Mapping[str, Array]]) -> StepOperands:
    """The engine's operands of each step of ``fixture`` (a chapter 37 fixture), whose
    published results ``steps`` (each step's ``weights`` and ``cached_*``) they are paired
    with: the cache's own sequence, step by step (the packed projection, the head split,
    RoPE at the position, the scores against the cached keys, the mixture and merge)."""
    from qkvcli.attention import engine
    from qkvcli.attention.maths import rope_tables, rotate, scale
    from qkvcli.chapters.ch37 import decoding_layer
    from qkvcli.core.projections import project

    layer = decoding_layer(fixture.spec)
    net, rope = layer.layer, layer.rope
    heads, d_h = net.heads, net.d_k
    width = heads * d_h
    x = fixture.input
    tokens = int(x.shape[1])
    packed, bias = net.packed()
    keys, queries, raw, scaled, merged, full = [], [], [], [], [], []
    with np.errstate(over="ignore", invalid="ignore"):
        for t, published in enumerate(steps):
            projected = project(x[:, t:t + 1], packed)  # [B,1,d] @ [d,3Hd_h] -> [B,1,3Hd_h]
            if bias is not None:
                projected = projected + bias
            keys.append(engine.heads_axis(projected[..., width:2 * width], heads))
            query = rotate(engine.heads_axis(projected[..., :width], heads), rope, t)
            score = query @ np.swapaxes(published["cached_keys"], -1, -2)  # [B,H,1,P]
            queries.append(query)
            raw.append(score)
            scaled.append(scale(score, d_h, net.given_scale))
            merged.append(engine.merge_heads(published["weights"] @ published["cached_values"]))
            full.append(engine.forward(net, x[:, :t + 1], True).concat[:, -1:])
    cos, sin = rope_tables(rope, 0, tokens)
    given = net.given_scale
    spec = fixture.spec
    return StepOperands(x, (spec.w_query, spec.w_key, spec.w_value, spec.w_out),
                        np.concatenate(keys, axis=2), cos, sin, tuple(queries), tuple(raw),
                        tuple(scaled), np.concatenate(merged, axis=1),
                        np.concatenate(full, axis=1),
                        1.0 / math.sqrt(d_h) if given is None else float(given))


def incremental_page(document: Mapping[str, Any], fixture: Any, precision: int,
                     title: str) -> str:
    """Chapter 37's page from its JSON ``document`` and its ``fixture`` (one
    self-contained HTML text): step 0, the last step, then steps 1, 2, ... while the page
    stays within :data:`~qkvcli.render.explorer.page.PAGE_BYTES`; each run of steps left
    out is a note that names them and says where their numbers are."""
    page = Page(title, precision)
    config = document["config"]
    steps = [tensors_of({"tensors": step}) for step in document["steps"]]
    e = step_operands(fixture, steps)
    page.select("batch", "batch item", int(config["batch"]))
    page.select("head", "head", int(config["heads"]))
    checks = entries_of(document)
    page.sections.append(checks_section(checks))
    page.sections.append(_layer(page, config, e))
    layout = "half" if config.get("rope_layout") == "half" else "interleaved"
    cached = sum(a["cached_keys"].size + a["cached_values"].size for a in steps)
    after = [_totals(page, document), _errors(document["errors"])]
    last = len(steps) - 1
    drawn: dict[int, str] = {}
    for t in dict.fromkeys((0, last, *range(1, last))):  # the first, the last, then in turn
        mark = page.mark()
        section = _step(page, t, document["steps"][t], steps[t], e, layout, document,
                        cached > CACHE_VALUES and t < last)
        if drawn and page.size((*drawn.values(), section, *after)) > PAGE_BYTES - NOTE_BYTES:
            page.rollback(mark)
            if t == last:
                continue
            break  # every later step is larger: none fits
        drawn[t] = section
    for t in range(len(steps)):
        if t in drawn:
            page.sections.append(drawn[t])
        elif t == 0 or t - 1 in drawn:  # the first of a run of steps left out
            run = next((u for u in range(t, len(steps)) if u in drawn), len(steps))
            page.sections.append(_elided(t, run - 1, int(config["tokens"])))
    page.sections.extend(after)
    passed = bool(document.get("passed"))
    return page.html(f"{title}: {document.get('chapter', '')}",
                     verdict(passed, *counted_checks(checks)), passed)


def _elided(first: int, end: int, tokens: int) -> str:
    """What the page leaves out of steps ``first`` to ``end``, and how to see them."""
    named = f"Step {first}" if first == end else f"Steps {first} to {end}"
    return (f'<section class="group step elided"><h2>{named}: not drawn</h2><p>The page keeps '
            f"to {PAGE_BYTES >> 20} MiB, as attend's page of a GPT-2 layer at 1,024 tokens "
            f"does, and drawing {'this step' if first == end else 'these steps'} too would "
            "pass it. The checks above judged every step. The JSON report holds every "
            f"number of each (<code>qkv run FIXTURE -f json</code>: <code>steps[{first}]</code>"
            + (f" to <code>steps[{end}]</code>" if first != end else "")
            + "), and step t reads only tokens 0 to t: a fixture of the input's first t + 1 of "
            f"its {tokens} tokens draws step t on its own page.</p></section>")


def _scalar(page: Page, key: str, value: int | float, derivation: Derivation | None,
            label: str) -> str:
    """One published number with its words: ``<dt>label</dt><dd>number</dd>``."""
    if derivation is None:
        page.given.add(key)
    return f"<dt>{escape(label)}</dt><dd>{page.number(key, '', value, derivation)}</dd>"


def _layer(page: Page, config: Mapping[str, Any], e: StepOperands) -> str:
    """The configuration (each size the fixture's or its input's), then the weights."""
    shape = "[" + ",".join(str(d) for d in e.input.shape) + "]"
    of_input = [("batch", "batch items", 0), ("tokens", "tokens (one step each)", 1),
                ("model_width", "model width d_model", 2)]
    items = [_scalar(page, f"config.{key}", int(config[key]), facts(
        "", f"axis {axis} of the input X [batch, tokens, d_model] = {shape}",
        [("X's shape", shape)], int(config[key])), label) for key, label, axis in of_input]
    items.append(_scalar(page, "config.heads", int(config["heads"]), None, "heads H"))
    items.append(_scalar(page, "config.head_width", int(config["head_width"]), facts(
        "head split", "d_model / H: each head's columns",
        [("d_model", int(config["model_width"])), ("H", int(config["heads"]))],
        int(config["head_width"])), "head width d_h"))
    for key, label in (("capacity", "cache capacity C"), ("rope_positions", "RoPE table rows"),
                       ("rope_base", "RoPE base"), ("tolerance", "tolerance of each step")):
        items.append(_scalar(page, f"config.{key}", config[key], None, label))
    def weights(why: str) -> list[str]:
        return [page.tensor(f"{branch}_weight", weight, None,
                            f"W_{letter} [d_model, {'d_out' if letter == 'O' else 'H·d_h'}], "
                            "given by the fixture", given=True, summarised=why)
                for branch, letter, weight in zip(("query", "key", "value", "output"), "QKVO",
                                                  e.weights, strict=True)]

    blocks = weights("")
    if sum(len(block.encode()) for block in blocks) > PAGE_BYTES // 4:
        blocks = weights(f"summarised: every value would take more than a quarter of the "
                         f"page's {PAGE_BYTES >> 20} MiB; the fixture holds them")
    items.append(f"<dt>RoPE layout</dt><dd>{escape(str(config['rope_layout']))}</dd>")
    return _section("The layer and its cache", "".join(items), "".join(blocks))


def _step(page: Page, t: int, step: Mapping[str, Any], a: Mapping[str, Array],
          e: StepOperands, layout: str, document: Mapping[str, Any], brief: bool) -> str:
    """Step ``t``: its lengths and shapes, its token, output and the causal pass's last
    row, their difference, the weights, the appended key and value, the cache after it
    (``brief``: summarised) and the step's work."""
    key = f"steps.{t}."
    before, after = int(step["cache_before"]), int(step["cache_after"])
    d_h = int(a["appended_key"].shape[-1])
    tolerance = float(document["config"]["tolerance"])
    previous = (f"steps.{t - 1}.cache_after", int(document["steps"][t - 1]["cache_after"])) \
        if t else ("a reset cache (the run starts with a reset)", 0)
    config = document["config"]
    shapes = []
    for name, third, source in (("cache_shape", "length", (f"{key}cache_after", after)),
                                ("storage_shape", "C", ("config.capacity",
                                                        int(config["capacity"])))):
        sources = [("config.batch", int(config["batch"])), ("config.heads",
                                                            int(config["heads"])),
                   source, ("config.head_width", int(config["head_width"]))]
        cells = [page.number(key + name, (i,), int(size), facts(
            "cache append", f"axis {i} of [B, H, {third}, d_h]", [sources[i]], int(size)))
            for i, size in enumerate(step[name])]
        shapes.append(f"<dt>{name.replace('_', ' ')}</dt><dd>[{', '.join(cells)}]</dd>")
    facts_html = "".join((
        _scalar(page, key + "position", int(step["position"]), facts(
            "rope", "the cache's length before the step: the position RoPE turns its query "
            "and key at", [(f"{key}cache_before", before)], int(step["position"])),
                "position (RoPE's offset)"),
        _scalar(page, key + "cache_before", before, facts(
            "cache append", "the length the cache had after the step before", [previous],
            before), "cache length before"),
        _scalar(page, key + "cache_after", after, counted(
            "the length before, and the one position this step appends",
            ("length before", "appended position"), (before, 1), after, "cache append"),
                "cache length after"),
        *shapes))

    def out(merged: Array, name: str, said: str) -> Make:
        """Row ``t`` of merged heads ``merged`` (called ``name``; ``said``: the row in
        words, ``{b}`` its batch item) times ``W_O``."""
        return lambda at, v: projection(
            merged, e.weights[3], None, (at[0], t, at[1]), v, (name, "W_O", "b_O"),
            "output projection")._replace(formula=f"{said.format(b=at[0])} column {at[1]} "
                                          "of W_O")

    def weight(at: tuple[int, ...], v: float) -> Derivation:
        k = at[-1]
        score = scores(e.queries[t], a["cached_keys"], at, float(e.raw[t][at]),
                       ("RQ", "K_cache"))
        found = attention_weight(e.raw[t], e.scaled[t], np.array(e.scaled[t]), a["weights"],
                                 at, e.factor, score=score)
        return found._replace(formula=f"{found.formula}: the query turned at position {t} "
                              f"against cached key {k}")

    def appended_key(at: tuple[int, ...], v: float) -> Derivation:
        b, h, _, c = at
        return rotation(e.keys, e.cos, e.sin, (b, h, t, c), v, layout, ("K_h", "RK_h"),
                        position=t)

    def appended_value(at: tuple[int, ...], v: float) -> Derivation:
        b, h, _, c = at
        found = projection(e.input, e.weights[2], None, (b, t, h * d_h + c), v,
                           ("X", "W_V", "b_V"))
        return found._replace(stage="head split", formula=f"{found.formula}; head {h}'s "
                              "columns (the head split), never turned")

    def cached(branch: str, newest: Make) -> Make:
        """Row ``j`` of the cache after this step: written by step ``j`` and kept (this
        step's own append, with its terms, at ``j = t``)."""
        def make(at: tuple[int, ...], v: float) -> Derivation:
            b, h, j, c = at
            wrote = f"written by step {j}, when the cache's length was {j}"
            if j == t:
                found = newest((b, h, 0, c), v)
                return found._replace(stage="cache append",
                                      formula=f"{wrote}: {found.formula}")
            source = f"steps.{j}.appended_{branch}[{b},{h},0,{c}]"
            return facts("cache append", f"{wrote}, and kept: the same number as {source}",
                         [(f"{source} (step {j}, position {j})", v)], v)
        return make

    work = step["work"]
    counts = "".join((
        _scalar(page, key + "work.full_prefix_rows", int(work["full_prefix_rows"]), counted(
            f"the rows of tokens 0..{t} a whole prefix projects: the cached and the new",
            (f"{key}cache_before (cached rows)", "the new token"), (before, 1),
            int(work["full_prefix_rows"])), "rows a full prefix projects"),
        _scalar(page, key + "work.incremental_rows", int(work["incremental_rows"]), facts(
            "", "the step projects only its one new token", [(f"{key}input rows", 1)],
            int(work["incremental_rows"])), "rows this step projects"),
        _scalar(page, key + "work.reused_rows", int(work["reused_rows"]), facts(
            "", "the cached rows it reads instead (for K and for V each)",
            [(f"{key}cache_before", before)], int(work["reused_rows"])),
                "rows it reuses from the cache")))
    gap = float(step["max_abs_difference"])
    difference = page.number(key + "max_abs_difference", "", gap, largest_difference(
        a["output"], a["full_prefix_last_row"], gap, tolerance,
        ("output", "full pass")))
    why = (f"summarised: the steps' caches hold more than {CACHE_VALUES} values, and the "
           "last step's cache holds these rows" if brief else "")
    shown: dict[str, tuple[Make | None, str]] = {
        "input": (None, f"x_{t} [batch, d_model]: token {t}, given by the fixture"),
        "weights": (weight, f"A [batch, head, query, key]: the new query over the {after} "
                    "cached keys (its own last)"),
        "output": (out(e.merged, "C", f"row {t} of C, this step's merged heads (A V_cache per "
                       "head, batch {b}), times"), "y_t [batch, d_out] = merge(A V_cache) W_O"),
        "full_prefix_last_row": (out(e.full_merged, "C_full", f"the causal pass over tokens "
                                     f"0..{t}: its last row of C (batch {{b}}) times"),
                                 f"the last row of the causal pass over tokens 0..{t}"),
        "appended_key": (appended_key, f"RK_h [batch, head, 1, d_h]: the key turned at "
                         f"position {before}"),
        "appended_value": (appended_value, "V_h [batch, head, 1, d_h]: the value as projected"),
        "cached_keys": (cached("key", appended_key),
                        f"K_cache [batch, head, {after}, d_h] after the step"),
        "cached_values": (cached("value", appended_value),
                          f"V_cache [batch, head, {after}, d_h] after the step"),
    }
    blocks = [page.tensor(key + name, a[name], None if make is None else each(a[name], make),
                          caption, given=make is None,
                          summarised=why if name.startswith("cached") else "")
              for name, (make, caption) in shown.items()]
    blocks.insert(4, f'<p class="caption">largest difference {difference} (tolerance '
                  f"{page.number('config.tolerance', '', tolerance)})</p>")
    return (f'<section class="group step" id="step-{t}"><h2>Step {t}</h2><dl class="facts">'
            + facts_html + "</dl>" + "".join(blocks) + '<dl class="facts">' + counts
            + "</dl></section>")


TOTALS = {
    "work": (("full_prefix_rows", "full_rows_per_projection",
              "rows each projection reads for whole prefixes"),
             ("incremental_rows", "incremental_rows_per_projection",
              "rows each projection reads with the cache"),
             ("reused_rows", "reused_rows_per_kv_projection",
              "rows of K (and of V) the cache reuses")),
    "history": (("full_prefix_rows", "complete_prefix_rows_per_projection",
                 "rows complete prefixes project"),
                ("incremental_rows", "incremental_rows_per_projection", "rows the cache projects"),
                ("reused_rows", "reused_key_rows", "key rows reused"),
                ("reused_rows", "reused_value_rows", "value rows reused")),
}
"""The document's totals of the steps' work, by section: the step's count each sums,
its key and its words."""


def _section(heading: str, items: str, after: str = "") -> str:
    """A section of numbers with their words (``items``), then ``after``."""
    return (f'<section class="group"><h2>{heading}</h2><dl class="facts">{items}</dl>{after}'
            "</section>")


def _totals(page: Page, document: Mapping[str, Any]) -> str:
    """The work over every step, the reset and the history: each count its sum over the
    steps (or the step it is)."""
    steps = document["steps"]
    last = len(steps) - 1

    def over(section: str) -> list[str]:
        return [_scalar(page, f"{section}.{key}", int(document[section][key]), counted(
            f"\u03a3 over the {len(steps)} steps of each step's work.{name}",
            [f"steps.{t}.work.{name}" for t in range(len(steps))],
            [int(s["work"][name]) for s in steps], int(document[section][key])), label)
            for name, key, label in TOTALS[section]]

    w, h, r = document["work"], document["history"], document["reset"]
    reused = int(w["reused_rows_per_kv_projection"])
    work = "".join((*over("work"), _scalar(
        page, "work.avoided_rows_across_kv", int(w["avoided_rows_across_kv"]), counted(
            "the reused rows of K and of V", ("K rows reused", "V rows reused"),
            (reused, reused), int(w["avoided_rows_across_kv"])), "rows of K and V avoided")))
    reset = "".join((
        _scalar(page, "reset.before", int(r["before"]), facts(
            "cache append", "the length a cache in use had when reset: after its last step",
            [(f"steps.{last}.cache_after", int(steps[last]["cache_after"]))],
            int(r["before"])), "length before the reset"),
        _scalar(page, "reset.after", int(r["after"]), facts(
            "cache append", "a reset sets the length to 0; the storage and binding stay",
            [("reset", "the length only")], int(r["after"])), "length after"),
        *(f"<dt>{label}</dt><dd>{'yes' if r[name] else 'no'}</dd>" for name, label in (
            ("allocation_reused", "the same storage arrays"),
            ("storage_unchanged", "the storage's values untouched"),
            ("replay_identical", "the same tokens again give identical evidence")))))
    rows = ", ".join(page.number("history.newest_query_key_rows", (t,), int(v), facts(
        "softmax", f"step {t}'s query reads the cache's length after the step (its own key "
        "last)", [(f"steps.{t}.cache_after", int(steps[t]["cache_after"]))], int(v)))
        for t, v in enumerate(h["newest_query_key_rows"]))
    history = "".join((f"<dt>keys the newest query reads, step by step</dt><dd>[{rows}]</dd>",
                       *over("history")))
    return _section("Work", work) + _section("Reset", reset) + _section("History", history)


def _errors(errors: list[Mapping[str, Any]]) -> str:
    """The eight refusals: each case, the error it must raise, the one raised, the message
    and the verdict (refused exactly and the cache unchanged)."""
    items = "".join(
        f'<li class="check {"pass" if e["rejected"] else "fail"}"><span class="word">'
        f'{"✔ PASS" if e["rejected"] else "✘ FAIL"}</span> <strong>{escape(str(e["case"]))}'
        f"</strong>: expected {escape(str(e['expected']))}, raised "
        f"{escape(str(e['raised'] or 'nothing'))}"
        f"{'; the cache unchanged' if e['rejected'] else ''}"
        f'<br><q class="message">{escape(str(e["message"]))}</q></li>' for e in errors)
    return ('<section class="group"><h2>Refusals</h2><p class="caption">each bad step on a '
            "cache of its own: the exact error, and the cache equal in values, length and "
            f'binding after it</p><ul class="refusals">{items}</ul></section>')

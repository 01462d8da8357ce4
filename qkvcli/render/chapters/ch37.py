"""Chapter 37's report, incremental attention: text and trace (the anchors' bytes), JSON, figure.

Pure functions of :class:`~qkvcli.chapters.ch37.IncrementalEvidence`; every published
name and all the chapter's wording live here. Numbers are fixed point as the reference
writes them (:func:`~qkvcli.render.numbers.course_fixed`): tokens at 6 decimals; keys,
values and outputs at 9; weights and differences at 12.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.chapters.ch37 import NAME, IncrementalEvidence
from qkvcli.render.chapters.entries import chapter_checks, refusals
from qkvcli.render.chapters.entries import json_document as json_document_of
from qkvcli.render.chapters.rows import Table, fields
from qkvcli.render.facts import entries, report, said, scalar, section, shape, tensor, verdict
from qkvcli.render.numbers import course_fixed, course_vector, fmt_bool, fmt_float, fmt_general

if TYPE_CHECKING:
    from qkvcli.render.rich.options import RichOptions

NEXT = "thread one independent cache through every decoder block"
TRACE_NEXT = "cached-generation"
ERROR_CASES = ("two_tokens", "full_cache", "model_mismatch", "head_mismatch", "layer_mismatch",
               "rope_mismatch", "rope_positions_mismatch", "nonfinite_projection")
"""The eight refusals, in the report's order (each ``true`` when refused exactly with
the cache unchanged), then ``unchanged``: every bad step left its cache as it was (the
JSON's ``unchanged`` of each refusal)."""


def _refused(errors: list[dict[str, Any]], case: str) -> str:
    return fmt_bool(any(e["case"] == case and e["rejected"].value for e in errors))


CONFIG = fields("config", "batch tokens model_width heads head_width capacity rope_base tolerance",
                rope_base=partial(course_fixed, precision=6),
                tolerance=partial(course_fixed, precision=12))
ERRORS = (*((case, "errors", lambda errors, case=case: _refused(errors, case))
            for case in ERROR_CASES),
          ("unchanged", "errors", lambda errors: fmt_bool(all(e["unchanged"].value for e in errors))))
SHARED = {"config": CONFIG, "work": (("", "work.*"),), "reset": (("", "reset.*"),),
          "errors": ERRORS, "history": (("", "history.*"),)}
"""The lines the text and the trace share, by the text's key (the trace's in capitals):
their facts (the work, the reset and the history each say every fact of their section)."""


def _shared(names: str, trace: bool) -> Table:
    return tuple((name.upper() if trace else name, SHARED[name]) for name in names.split())


def _of(i: int, name: str, decimals: int | None = None, head: int | None = None) -> tuple[str, Any]:
    """A part reading fact ``name`` of step ``i`` (``head``: that head's slice), in the
    course's fixed point at ``decimals`` (``None``: as its kind is said)."""
    def spell(steps: list[dict[str, Any]]) -> str:
        fact = steps[i][name]
        if decimals is None:
            return said(fact)
        value = fact.value if head is None else fact.value[:, head]
        return course_vector(value, decimals) if np.ndim(value) else course_fixed(value, decimals)
    return ("steps", spell)


def _step_text(i: int) -> tuple[str, Any]:
    return ("step", (("position", *_of(i, "position")),
                     ("cache", "steps", lambda st: f"{st[i]['cache_before']}->{st[i]['cache_after']}"),
                     ("shape", *_of(i, "cache_shape")),
                     ("max_abs_diff", *_of(i, "max_abs_difference", 12)),
                     ("output", *_of(i, "output", 9))))


def _step_trace(i: int, heads: int) -> Table:
    at = ("position", *_of(i, "position"))
    return (
        ("STEP", (at, *((name, *_of(i, name)) for name in ("cache_before", "cache_after")),
                  ("input", *_of(i, "input", 6)), ("cache_shape", *_of(i, "cache_shape")))),
        *(("HEAD", (at, ("head", lambda e, h=h: h), *(
            (label, *_of(i, name, decimals, h)) for label, name, decimals in (
                ("appended_key", "appended_key", 9), ("appended_value", "appended_value", 9),
                ("keys", "cached_keys", 9), ("values", "cached_values", 9),
                ("weights", "weights", 12))))) for h in range(heads)),
        ("MATCH", (at, ("incremental", *_of(i, "output", 9)),
                   ("full", *_of(i, "full_prefix_last_row", 9)),
                   ("max_abs_diff", *_of(i, "max_abs_difference", 12)))))


def text(evidence: IncrementalEvidence) -> str:
    """The chapter's text report, ``key=value`` lines ending with a newline."""
    return report(facts(evidence), evidence, (
        ("chapter", lambda e: NAME), *_shared("config", False),
        *(_step_text(i) for i in range(len(evidence.steps))),
        *_shared("work reset errors history", False), ("next", lambda e: NEXT)))


def trace(evidence: IncrementalEvidence) -> str:
    """The chapter's diagram trace: the configuration; per step the token, each head's
    appended key and value, its cached keys and values and its weights, and the step
    against the whole pass; then the work, the reset, the refusals and the history."""
    heads = evidence.fixture.spec.heads
    return "INCREMENTAL_ATTENTION_TRACE_V1\n" + report(facts(evidence), evidence, (
        *_shared("config", True),
        *(line for i in range(len(evidence.steps)) for line in _step_trace(i, heads)),
        *_shared("work reset errors history", True), ("END", (("next", lambda e: TRACE_NEXT),))),
        True)


# --- JSON -----------------------------------------------------------------------------------

JSON_KEYS = ("qkv_version", "schema_version", "report", "chapter", "passed", "checks", "config",
             "steps", "work", "reset", "errors", "history")
"""The JSON report's keys, in order."""


def facts(evidence: IncrementalEvidence) -> dict[str, Any]:
    """The chapter's facts (:mod:`qkvcli.render.facts`) under :data:`JSON_KEYS` after
    the head: what the JSON publishes and the text and trace say."""
    f = evidence.fixture
    batch, tokens, width = (int(d) for d in f.input.shape)
    rows, cached = ("batch", "token", "feature"), ("batch", "head", "position", "feature")
    steps = [{
        "position": s.position, "cache_before": s.cache_before, "cache_after": s.cache_after,
        "input": tensor(s.input, rows, given=True), "output": tensor(s.output, rows),
        "full_prefix_last_row": tensor(s.full, rows),
        "max_abs_difference": scalar(s.max_abs_difference),
        "cache_shape": shape(s.cache_shape), "storage_shape": shape(s.storage_shape),
        "appended_key": tensor(s.appended_key, cached),
        "appended_value": tensor(s.appended_value, cached),
        "cached_keys": tensor(s.keys, cached), "cached_values": tensor(s.values, cached),
        "weights": tensor(s.weights, ("batch", "head", "query", "key")),
        "work": section(full_prefix_rows=s.full_prefix_rows,
                        incremental_rows=s.incremental_rows, reused_rows=s.reused_rows),
    } for s in evidence.steps]
    w, r, h = evidence.work, evidence.reset, evidence.history
    kept = dict(zip((e.case for e in evidence.errors), evidence.kept, strict=True))
    return {
        "checks": chapter_checks(NAME, evidence),
        "config": section(batch=batch, tokens=tokens, model_width=width, heads=f.spec.heads,
                          head_width=f.spec.table.features, capacity=f.capacity,
                          rope_positions=f.spec.table.positions,
                          rope_base=scalar(float(f.spec.table.base)),
                          rope_layout=f.spec.table.layout,
                          tolerance=scalar(float(f.invariant_tolerance))),
        "steps": entries(steps),
        "work": section(full_rows_per_projection=w.full_rows_per_projection,
                        incremental_rows_per_projection=w.incremental_rows_per_projection,
                        reused_rows_per_kv_projection=w.reused_rows_per_kv_projection,
                        avoided_rows_across_kv=w.avoided_rows_across_kv),
        "reset": section(before=r.before, after=r.after,
                         allocation_reused=verdict(r.allocation_reused),
                         storage_unchanged=verdict(r.storage_unchanged),
                         replay_identical=verdict(evidence.replay_bitwise)),
        "errors": refusals(evidence.errors, ("case", "expected", "raised", "rejected", "unchanged",
                                             "message"), unchanged=lambda e: verdict(kept[e.case])),
        "history": section(
            newest_query_key_rows=shape(h.newest_query_key_rows),
            complete_prefix_rows_per_projection=h.complete_prefix_rows_per_projection,
            incremental_rows_per_projection=h.incremental_rows_per_projection,
            reused_key_rows=h.reused_key_rows, reused_value_rows=h.reused_value_rows),
    }


def json_document(evidence: IncrementalEvidence) -> dict[str, Any]:
    """The JSON report, :data:`JSON_KEYS` in order: the head, then :func:`facts`."""
    return json_document_of(NAME, evidence, facts(evidence))


# --- the figure -----------------------------------------------------------------------------


def figure(evidence: IncrementalEvidence, width: int, options: RichOptions | None = None) -> Any:
    """The chapter's picture as a rich renderable, in the order of :func:`trace`: per step
    the cache before and after, its weights per head and its output against the whole
    pass; then the work, the reset, the refusals, the checks and the verdict line. Formulas
    and the worked line are the stages' (:mod:`qkvcli.render.chapters.figure`), numbers at
    ``options``' precision. The first batch item is drawn."""
    from rich.console import Group
    from rich.text import Text

    from qkvcli.render.chapters import figure as kit
    from qkvcli.render.rich.options import RichOptions
    from qkvcli.stages.terms import largest_difference

    options = options or RichOptions()
    n = options.precision  # every number of the figure at the caller's precision
    f, w, r = evidence.fixture, evidence.work, evidence.reset
    heads = f.spec.heads
    worst = max(evidence.steps, key=lambda s: s.max_abs_difference, default=None)
    return Group(
        kit.heading("Chapter 37 - incremental attention", f"a KV cache of {f.capacity} positions, "
                f"{heads} heads of {f.spec.table.features}, RoPE base "
                f"{fmt_general(f.spec.table.base, kit.SETTING)} at the cache's length; batch item 0 of "
                f"{int(f.input.shape[0])}", evidence.passed),
        kit.element("cache append", options),
        Text(kit.formula(options, "scores", "scale", "softmax", "mixture", "head merge",
                     "output projection"), style="dim"),
        kit.card("one token a step", ["step", "weights by head", "output"],
             [[f"{s.position}: cache {s.cache_before} -> {s.cache_after}",
               "\n".join(f"{h}: {kit.numbers(s.weights[0, h], options, ', ')}" for h in range(heads)),
               kit.numbers(s.output[0], options, ", ")] for s in evidence.steps],
             left=(0, 1, 2), wrap=True),
        *([kit.worked(f"max |step {worst.position} - pass|", largest_difference(
            worst.output, worst.full, worst.max_abs_difference, f.invariant_tolerance,
            ("step", "pass")), options)] if worst is not None else []),
        *kit.showed("what the cache showed", [
            ("rows per projection", f"{w.incremental_rows_per_projection} step by step, "
             f"{w.full_rows_per_projection} for whole prefixes"),
            ("rows of K and V reused", str(w.avoided_rows_across_kv)),
            ("largest |step - pass|", fmt_float(max(
                (s.max_abs_difference for s in evidence.steps), default=0.0), n)),
            ("reset", f"{r.before} -> {r.after}, storage kept: "
             f"{fmt_bool(r.allocation_reused and r.storage_unchanged)}, replay identical: "
             f"{fmt_bool(evidence.replay_bitwise)}"),
            ("bad steps refused", f"{sum(e.rejected for e in evidence.errors)} of "
             f"{len(evidence.errors)}, the cache unchanged: {fmt_bool(evidence.unchanged)}")]),
        *kit.closing(evidence.checks))

"""``qkv attend``: the head's (or layer's) evidence as ``key=value`` text and as JSON.

Every word ``qkv attend`` prints lives here: the check details, the teacher's notes and
the published names of the tensors and checks. The evidence holds tensors by vocabulary
name (``w_query``, ``attention``, ``grad_attention``, ...); :func:`published_name`
gives the names the text and the JSON have always used (``query_weight``, ``weights``,
``weights_gradient``, ...; the JSON names its checks by :mod:`qkvcli.render.names`),
and a parameter read from a checkpoint its framework's name (``q_proj_weight``,
``o_proj_weight_gradient``). The rich view (:mod:`qkvcli.render.rich.attend`) reuses
the same wording.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.attention.records import AttendConfig, AttendEvidence, HullEvidence, Note
from qkvcli.core.invariants import FutureZero, RowSums
from qkvcli.core.names import BRANCHES
from qkvcli.core.text import escape_controls
from qkvcli.reading.attend import pieces_document
from qkvcli.render.decode import decode_facts, decode_table
from qkvcli.render.document import check_entry, dumps, gradcheck_json, head
from qkvcli.render.facts import (
    Table,
    entries,
    json_of,
    record,
    scalar,
    section,
    shape,
    tensor,
    values,
    verdict,
)
from qkvcli.render.facts import pieces as laid
from qkvcli.render.names import ATTEND
from qkvcli.render.numbers import fmt_bool, fmt_exact, fmt_float, fmt_general, fmt_shape, fmt_vector
from qkvcli.render.views import Asked
from qkvcli.render.wording import Check, said
from qkvcli.render.wording import verdict as verdict_line

if TYPE_CHECKING:
    from qkvcli.core.rope import Rope

FORMULA = "O = softmax(Q K^T / sqrt(d_k)) V"
PRECISION = 6
"""Decimals of the text view's numbers unless the caller asks for others (as the docs say)."""

PARAMETERS = ("input", "w_query", "w_key", "w_value", "b_query", "b_key", "b_value",
              "w_packed", "b_packed", "w_out", "b_out", "norm_query", "norm_key",
              "norm_query_bias", "norm_key_bias")
FORWARD = ("query", "key", "value", "scores", "scaled_scores", "attention", "concat", "output")
REVERSE = ("grad_output", "grad_concat", "grad_attention", "grad_scaled_scores", "grad_scores",
           "grad_query", "grad_key", "grad_value", "grad_input",
           "grad_w_query", "grad_w_key", "grad_w_value", "grad_b_query", "grad_b_key",
           "grad_b_value", "grad_w_packed", "grad_b_packed", "grad_w_out", "grad_b_out",
           "grad_norm_query", "grad_norm_key", "grad_norm_query_bias", "grad_norm_key_bias")
"""The text view's tensors, by vocabulary name, in the order it prints them."""

_PUBLISHED = {
    "attention": "weights", "concat": "heads_output", "grad_output": "upstream_output",
    "norm_query": "q_norm_weight", "norm_key": "k_norm_weight",
    "norm_query_bias": "q_norm_bias", "norm_key_bias": "k_norm_bias",
    **{f"w_{branch}": f"{branch}_weight" for branch in BRANCHES},
    **{f"b_{branch}": f"{branch}_bias" for branch in BRANCHES},
}
SPLIT_VIEWS = tuple(f"{part}_{branch}" for part in ("w", "b", "grad_w", "grad_b")
                    for branch in BRANCHES)
"""A packed projection's per-branch views: the same numbers as ``w_packed`` (or its
gradient), so a packed layer's text and JSON give them as digests only."""
CHECK_NAMES = {"attention": "weights"}
"""Checks published under another name: the attention check has always been ``weights``."""
TEXT_KEYS = ("attend", "formula", "config", "layout", "layer", "parameter_names", "parameter_count",
             "function", "scale", "loss", "token", "check", "head", "gradcheck", "probe", "note",
             "decode", "decode_step")
"""The text view's line keys that are not tensors: no published tensor name may be one."""


def published_name(name: str, config: AttendConfig) -> str:
    """The published (text and JSON) name of the tensor ``name`` of evidence with ``config``.

    A parameter read from a checkpoint, and its gradient, take its framework's name
    (:func:`framework_names`: ``q_proj_weight``, ``o_proj_weight_gradient``). Otherwise
    ``w_query`` is ``query_weight``, ``grad_w_query`` ``query_weight_gradient``,
    ``attention`` ``weights``, ``grad_output`` ``upstream_output``; a packed projection
    (``w_packed``) and an output projection (``w_out``) take their layout's name
    (``in_proj_weight``, ``c_proj_bias``, ...).
    """
    gradient = name.startswith("grad_") and name != "grad_output"
    base = name[5:] if gradient else name
    framework = framework_names(config).get(base) if config.sources else None
    if framework is None:
        return default_name(name, config)
    return f"{framework}_gradient" if gradient else framework


def default_name(name: str, config: AttendConfig) -> str:
    """The published name of tensor ``name`` without the checkpoint's names (the
    vocabulary's, as qkv has always published it)."""
    if name == "grad_output":
        return "upstream_output"
    gradient = name.startswith("grad_")
    base = name[5:] if gradient else name
    if base in ("w_packed", "b_packed", "w_out", "b_out"):
        layout = config.packed if base.endswith("packed") else config.out_layout
        base = f"{layout}_{'weight' if base[0] == 'w' else 'bias'}"
    else:
        base = _PUBLISHED.get(base, base)
    return f"{base}_gradient" if gradient else base


def framework_key(tensor: str) -> str | None:
    """The published key of a checkpoint tensor named ``tensor``: its last module name and
    its parameter name joined by ``_`` (``q_proj.weight`` is ``q_proj_weight``, BERT's
    ``output.dense.bias`` ``dense_bias``), or ``None`` unless both are ASCII identifiers
    and the module is not a number (an ``nn.Sequential`` index names nothing)."""
    parts = tensor.split(".")
    if len(parts) < 2 or not all(p.isascii() and p.isidentifier() for p in parts[-2:]):
        return None
    return f"{parts[-2]}_{parts[-1]}"


def framework_names(config: AttendConfig) -> dict[str, str]:
    """``{vocabulary name: published key}`` of the parameters read from a checkpoint
    (``config.sources``), by :func:`framework_key`; empty (every parameter keeps its
    :func:`default_name`) when any key is unusable or would collide with another
    published name, its own gradient's, a text line's key or another parameter's."""
    keys = {name: framework_key(tensor) for name, tensor in config.sources}
    found = {name: key for name, key in keys.items() if key is not None}
    if len(found) < len(keys):
        return {}
    # every other tensor's name, also of tensors this layer lacks: a spare name only
    # ever makes the layer fall back to the defaults, never two tensors share one
    renamed = {*found, *(f"grad_{name}" for name in found)}
    taken = {*TEXT_KEYS, *(default_name(name, config) for name in (*PARAMETERS, *FORWARD,
                                                                    *REVERSE) if name not in renamed)}
    published = [*found.values(), *(f"{key}_gradient" for key in found.values())]
    if len(set(published)) < len(published) or taken & set(published):
        return {}
    return found


def checked_name(name: str, config: AttendConfig) -> str:
    """The published name of a gradient-checked tensor (internal ``w_query``, ``b_out``...)."""
    if name in ("w_out", "b_out") and config.out_layout is None:
        return f"out_proj_{'weight' if name == 'w_out' else 'bias'}"
    return published_name(name, config)


def check_name(name: str) -> str:
    """A check's published name (``attention`` is published as ``weights``)."""
    return CHECK_NAMES.get(name, name)


def failed_checks(evidence: AttendEvidence) -> list[str]:
    """The published names of the checks that failed, in order."""
    return [check_name(check.name) for check in evidence.checks if not check.passed]


# --- the checks' wording --------------------------------------------------------------


def attend_checks(evidence: AttendEvidence) -> tuple[Check, ...]:
    """Every check in declared order, by published name, with its one-line detail from
    the one wording table (:func:`~qkvcli.render.wording.said`).

    The text, JSON and rich views all list these rows, so their wording cannot drift.
    """
    return tuple(Check(check_name(v.name), v.passed, said(ATTEND, evidence, v))
                 for v in evidence.checks)


def note_text(note: Note) -> str:
    """A teacher's note in words (its ``code`` names it; see :class:`Note`)."""
    if note.code == "collapsed-roles":
        return ("W_Q = W_K = W_V: every token is matched with, and hands over, the same "
                "vector; matching and content collapse into one role (the primer's gotcha: "
                "self-attention means the same input, not the same projection)")
    if note.code == "symmetric-matching":
        return ("W_Q = W_K: q_i.k_j = q_j.k_i, so matching is symmetric; token i cannot look "
                "for something other than what it advertises")
    if note.code == "independent-value-width":
        return f"d_v = {note.d_v} differs from d_k = {note.d_k}: the output takes the value width"
    raise ValueError(f"unknown note code {note.code!r}")


# --- text -----------------------------------------------------------------------------


def upstream_source(evidence: AttendEvidence) -> str:
    """Where ``U`` of ``L = <O,U>`` came from: the fixture's ``upstream.output``, or
    SplitMix64 draws from the fixture's seed."""
    if evidence.upstream_given:
        return "U from the fixture's upstream.output"
    return f"U from SplitMix64(seed {evidence.seed}) uniform [-1,1)"


def _spelt(value: Any) -> str:
    """A value of ``config`` in the ``function=`` line: a flag ``true``, a float as given,
    a list ``[a,b]``, a mapping ``key=value,...``, a name with its controls escaped."""
    if isinstance(value, bool):
        return fmt_bool(value)
    if isinstance(value, float):
        return fmt_exact(value)
    if isinstance(value, list):
        return "[" + ",".join(map(_spelt, value)) + "]"
    if isinstance(value, dict):
        return ",".join(f"{key}={_spelt(item)}" for key, item in value.items())
    return escape_controls(str(value))


UNSAID = ("scale_given", "parameter_sources")
"""What a real layer adds to ``config`` that the ``function=`` line does not say (the
``scale=`` line says the one, the other is the checkpoint's)."""


def _function(found: dict[str, Any]) -> str:
    """The ``function=`` line's words: what a real layer adds to ``config``, a list written
    without its brackets (``alibi:0.5,0.25``)."""
    return " ".join(f"{key}:{_spelt(value)[1:-1] if isinstance(value, list) else _spelt(value)}"
                    for key, value in found.items() if key not in UNSAID)


def _heads_line(h: dict[str, Any], precision: int) -> str:
    w, m, hull = h["weights"].value, h["mask"].value, h["hull"].value
    return (f"{h['head']} {'PASS' if h['passed'].value else 'FAIL'} "
            f"min_weight:{fmt_float(w['min_weight'].value, precision)} "
            f"max_row_deviation:{fmt_float(w['max_row_deviation'].value, precision)} "
            f"max_masked_weight:{fmt_float(m['max_masked_weight'].value, precision)} "
            f"hull_residual:{fmt_float(hull['barycentric_residual'].value, precision)} "
            f"box_violations:{hull['box_violations']}")


FORWARD_COMMENT = ("# forward: Q,K,V projections; S = Q K^T; Z = S*scale (causal: -inf above "
                   "the diagonal); A = softmax(Z) (row max subtracted); O = A V")
REVERSE_COMMENT = ("dA = dO V^T, dV = A^T dO, dZ = A*(dA - rowsum(dA*A)), dS = dZ*scale, "
                   "dQ = dS K, dK = dS^T Q, dX = sum of three paths")


def _comment(words: str) -> tuple[str, Any]:
    """A line of words alone, no key (a ``#`` comment, the verdict)."""
    return ("", lambda e: words)


def _text(evidence: AttendEvidence, found: dict[str, Any], precision: int) -> Table:
    """The text's lines over the evidence's facts: the configuration, every tensor in the
    order of the data flow, each query's row, the reverse, the checks, the verdict."""
    c = evidence.config

    def tensors(names: tuple[str, ...]) -> Table:
        shown = found["tensors"].value
        return tuple((published_name(name, c), f"tensors.{published_name(name, c)}")
                     for name in names if published_name(name, c) in shown)

    def row(r: dict[str, Any]) -> str:
        return (f"b{r['batch']} t{r['token']} weights:{fmt_vector(r['weights'].value, precision)} "
                f"sum:{fmt_float(r['weight_sum'].value, precision)} "
                f"output:{fmt_vector(r['output'].value, precision)}")

    function = _function(_function_json(c))
    return (
        ("attend", lambda e: escape_controls(e.chapter)),
        ("formula", lambda e: formula_of(c)),
        ("config", (*((name, f"config.{name}") for name in (
            "batch", "tokens", "d_model", "d_k", "d_v", "causal", "value_width")),
            ("bias", "config.bias", lambda b: ",".join(f"{k}={fmt_bool(v)}" for k, v in b.items())))),
        ("layout", (("", "config.layout", lambda v: f"{v}:"), ("", "config.layout_description"))),
        *(() if c.heads is None else (("layer", (*((name, f"config.{name}") for name in (
            "heads", "d_k", "d_v", "e_out")), ("out_projection", "config.out_projection",
                                               lambda v: v or "none"))),)),
        ("parameter_names", ("parameter_names", lambda names: f"[{','.join(names)}]")),
        ("parameter_count", "parameter_count"),
        *(() if not function else (("function", lambda e: function),)),
        ("scale", ("config.scale", lambda v: f"{fmt_float(v, precision)} (given, not "
                   f"1/sqrt({c.d_k}))" if c.scale_given else f"1/sqrt({c.d_k})={fmt_float(v, precision)}")),
        _comment("# parameters and input"), *tensors(PARAMETERS),
        _comment(FORWARD_COMMENT), *tensors(FORWARD),
        _comment("# each query position: its weights over the keys and its output"),
        *(("token", ("rows", lambda rows, i=i: row(rows[i]))) for i in range(len(evidence.rows))),
        _comment(f"# reverse: L = <O,U>, {upstream_source(evidence)}; {REVERSE_COMMENT}"),
        ("loss", ("loss", lambda v: fmt_float(v, precision))), *tensors(REVERSE),
        *decode_table(evidence.decode),
        _comment("# checks"),
        *(("check", lambda e, ch=ch: f"{ch.name} {'PASS' if ch.passed else 'FAIL'} {ch.detail}")
          for ch in attend_checks(evidence)),
        *(("head", ("heads", lambda heads, i=i: _heads_line(heads[i], precision)))
          for i in range(len(evidence.heads))),
        *(("gradcheck", lambda e, t=t: f"{checked_name(t.tensor, c)} mode:{t.mode} "
           f"checked:{len(t.checks)} requested:{t.requested} "
           f"recomputes:{t.recomputes.replace(' ', '_')} {'PASS' if t.passed else 'FAIL'}")
          for t in evidence.gradcheck.tensors),
        *(("probe", ("probes", lambda probes, i=i: " ".join(
            f"{name}:{fmt_shape(shape.value)}" for name, shape in probes[i].items())))
          for i in range(len(evidence.probes))),
        *(("note", lambda e, n=n: f"{n.code} {note_text(n)}") for n in evidence.notes),
        _comment(verdict_line(evidence.passed, sum(c.passed for c in evidence.checks),
                              len(evidence.checks))),
    )


def render_attend_text(evidence: AttendEvidence, precision: int = PRECISION,
                       tensors: str = "summary") -> str:
    """The head's evidence, one fact per line, ending with the verdict line and a newline.

    Takes the evidence, ``precision``, the decimals of every number the view prints
    (default :data:`PRECISION`, 6, as the docs say; check details keep their own formats)
    and ``tensors``, how much of each tensor it shows (:mod:`qkvcli.render.tensors`:
    by default every value up to 4096 elements, a summary and digest above).
    """
    found = facts(evidence)
    return "".join(laid(found, evidence, _text(evidence, found, precision), tensors=tensors,
                        precision=precision))


def formula_of(c: AttendConfig) -> str:
    """The formula line: the chapter's, or the real layer's q/k norm, RoPE and given scale."""
    if (c.rope is None and not c.scale_given and c.softcap is None and c.alibi is None
            and c.qk_norm is None):
        return FORMULA
    after = c.qk_norm is not None and c.qk_norm.after == "rope"
    q, k = ("norm(Q)", "norm(K)") if c.qk_norm is not None and not after else ("Q", "K")
    if c.rope is not None:
        q, k = f"rope({q})", f"rope({k})"
    if after:
        q, k = f"norm({q})", f"norm({k})"
    scaled = f" * {fmt_exact(c.scale)}" if c.scale_given else " / sqrt(d_k)"
    rounded = "bf16(slope_h j)" if c.alibi_rounding == "bfloat16" else "slope_h j"
    if c.alibi is not None and c.alibi_scaled:  # Falcon: the bias scaled with the scores
        return f"O = softmax(({q} {k}^T + {rounded}){scaled}) V"
    if c.alibi is not None:
        scaled += f" + {rounded}"
    if c.softcap is not None:
        return f"O = softmax({fmt_exact(c.softcap)} tanh({q} {k}^T{scaled} / {fmt_exact(c.softcap)})) V"
    return f"O = softmax({q} {k}^T{scaled}) V"


def rope_words(rope: Rope) -> str:
    """A RoPE in the rich views' words: ``theta 10000 dims 64 half``, or with a table of
    frequencies ``frequencies given (32) dims 64 half``."""
    given = rope.frequencies
    base = (f"frequencies given ({len(given)})" if given is not None
            else f"theta {fmt_general(rope.theta or 0.0, 6)}")
    return f"{base} dims {rope.dims} {rope.layout}"


def tensor_axes(name: str, c: AttendConfig, shape: tuple[int, ...]) -> tuple[str, ...]:
    """The axes of attend's tensor ``name`` of ``shape`` (by vocabulary name; a gradient's
    are its tensor's), or none where the shape does not have them: a layer's projections
    hold its heads side by side (``heads_d_k``; grouped K/V weights ``kv_heads_d_k``); a
    packed projection and an output weight, kept as the fixture laid them out, are not
    named."""
    heads, kv_heads = c.heads or 1, c.kv_heads or c.heads or 1
    q, v = ("heads_d_k", "heads_d_v") if c.heads is not None else ("d_k", "d_v")
    kv = ("kv_heads_d_k", "kv_heads_d_v") if c.kv_heads is not None else (q, v)
    sizes = {"batch": c.batch, "token": c.tokens, "query": c.tokens, "key": c.tokens,
             "head": c.heads, "d_model": c.d_model, "d_k": c.d_k, "d_v": c.d_v,
             "heads_d_k": heads * c.d_k, "heads_d_v": heads * c.d_v, "e_out": c.e_out,
             "kv_heads_d_k": kv_heads * c.d_k, "kv_heads_d_v": kv_heads * c.d_v}
    grid = ("batch", "query", "key") if c.heads is None else ("batch", "head", "query", "key")
    widths = dict(zip(BRANCHES, (q, *kv), strict=True))
    axes = {"input": ("batch", "token", "d_model"), "b_out": ("e_out",),
            "query": ("batch", "query", q), "key": ("batch", "key", q),
            "value": ("batch", "key", v), "concat": ("batch", "query", v),
            "output": ("batch", "query", "d_v" if c.heads is None else "e_out"),
            **dict.fromkeys(("scores", "scaled_scores", "attention"), grid),
            **{f"w_{branch}": ("d_model", width) for branch, width in widths.items()},
            **{f"b_{branch}": (width,) for branch, width in widths.items()}
            }.get(name.removeprefix("grad_"), ())
    fits = len(axes) == len(shape) and all(
        sizes[a] == n for a, n in zip(axes, shape, strict=True))
    return axes if fits else ()


def _rows_facts(rows: RowSums, mask: FutureZero, hull: HullEvidence) -> dict[str, Any]:
    """The attention rows', the mask's and the hull's facts (of a head, or the worst of a
    layer's heads), as ``weights``, ``mask`` and ``hull``."""
    return {
        "weights": section(min_weight=scalar(rows.min_attention),
                           max_row_deviation=scalar(rows.max_row_deviation),
                           tolerance=rows.tolerance),
        "mask": section(applicable=verdict(mask.applicable),
                        max_masked_weight=scalar(mask.max_masked_attention)),
        "hull": section(barycentric_residual=scalar(hull.barycentric_residual),
                        box_violations=hull.box_violations, tolerance=scalar(hull.tolerance)),
    }


def _function_json(c: AttendConfig) -> dict[str, Any]:
    """What a real layer adds to ``config`` (nothing for a fixture without it)."""
    found: dict[str, Any] = {key: value for key, value in (
        ("architecture", c.architecture), ("kv_heads", c.kv_heads)) if value is not None}
    if c.rope is not None:
        base: dict[str, Any] = ({"theta": c.rope.theta} if c.rope.frequencies is None
                                else {"frequencies": list(c.rope.frequencies)})
        found["rope"] = {**base, "dims": c.rope.dims, "layout": c.rope.layout}
    if c.scale_given:
        found["scale_given"] = True
    found |= pieces_document(c)
    if c.sources:  # the framework's own tensor names, relative to the layer
        found["parameter_sources"] = {published_name(n, c): tensor for n, tensor in c.sources}
    return found


def _gradcheck_json(evidence: AttendEvidence) -> Any:
    """The shared gradient-check document, each tensor under its published name."""
    c = evidence.config

    def published(result: Any) -> dict[str, Any]:
        document = gradcheck_json(result)
        if document["worst"] is not None:
            document["worst"]["tensor"] = checked_name(document["worst"]["tensor"], c)
        for checked in document["tensors"]:
            checked["tensor"] = checked_name(checked["tensor"], c)
            for check in checked["checks"]:
                check["tensor"] = checked["tensor"]
        return document

    return record(evidence.gradcheck, published)


def facts(evidence: AttendEvidence) -> dict[str, Any]:
    """The head's (or layer's) facts after the JSON's head; a multi-head layer
    (``config.heads`` set) adds ``config.heads``, ``config.e_out``,
    ``config.out_projection`` and a ``heads`` list of per-head evidence, a decode its
    ``decode`` section."""
    c = evidence.config
    layer = {} if c.heads is None else {"heads": c.heads, "e_out": c.e_out,
                                         "out_projection": c.out_layout}
    found: dict[str, Any] = {
        "config": section(
            batch=c.batch, tokens=c.tokens, d_model=c.d_model, d_k=c.d_k, d_v=c.d_v,
            causal=verdict(c.causal), value_width=c.value_width,
            bias=dict(zip(BRANCHES, c.bias, strict=True)), layout=c.layout,
            layout_description=c.layout_description, scale=c.scale, seed=evidence.seed,
            upstream="given" if evidence.upstream_given else "seeded",
            **_function_json(c), **layer),
        "parameter_names": list(c.names),
        "parameter_count": c.parameter_count,
        "loss": scalar(evidence.primary.loss),
        "checks": [check_entry("attend", v.name, ch.passed, ch.detail)
                   for v, ch in zip(evidence.checks, attend_checks(evidence), strict=True)],
        "notes": [{"code": n.code, "text": note_text(n)} for n in evidence.notes],
        "tensors": section(**{published_name(name, c): tensor(
            value, tensor_axes(name, c, np.shape(value)),
            given=name in PARAMETERS or (name == "grad_output" and evidence.upstream_given),
            policy="none" if c.packed is not None and name in SPLIT_VIEWS else None)
            for name, value in evidence.primary.tensors.items()}),
        "rows": entries([{"batch": r.batch, "token": r.token, "weights": values(r.attention),
                          "weight_sum": scalar(r.attention_sum), "output": values(r.output)}
                         for r in evidence.rows]),
        **_rows_facts(evidence.attention, evidence.mask, evidence.hull),
        "probes": entries([{"input": shape(p.input),
                            **{name: shape(got) for name, got, _ in p.results}}
                           for p in evidence.probes]),
        "replay_bitwise": verdict(evidence.replay_bitwise),
        "gradcheck": _gradcheck_json(evidence),
    }
    if c.heads is not None:
        found["heads"] = entries([{"head": h.head, "passed": verdict(h.passed),
                                   **_rows_facts(h.attention, h.mask, h.hull)}
                                  for h in evidence.heads])
    if evidence.decode is not None:
        found["decode"] = decode_facts(evidence.decode)
    return found


def attend_json(evidence: AttendEvidence, tensors: str = "summary") -> dict[str, Any]:
    """The head's evidence as a JSON-ready dictionary (``-inf`` masked scores as strings),
    each tensor per ``tensors`` (a packed layer's split views as digests only)."""
    return {**head("attend", chapter=evidence.chapter, passed=evidence.passed),
            **json_of(facts(evidence), tensors)}


def pieces(evidence: AttendEvidence, fmt: str, asked: Asked) -> Iterator[str]:
    """The evidence as ``text`` (at ``asked.precision``, else :data:`PRECISION`) or
    ``json``, each with ``asked.tensors``."""
    if fmt == "json":
        return iter([dumps(attend_json(evidence, asked.tensors))])
    precision = PRECISION if asked.precision is None else asked.precision
    return iter([render_attend_text(evidence, precision, asked.tensors)])

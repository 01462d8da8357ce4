"""The four kinds of operation ``qkv check`` judges, as data: the chapter's projections
(``forward``, ``backward``), one attention head (``head_forward``, ``head_backward``), RoPE
(``rope``, ``rope_reverse``) and multi-head attention (``mha_forward``, ``mha_backward``).

Every family shared by the kinds (forward, reverse, shapes, errors, replay, purity, the
gradient check) is written once over a :class:`Kind`: its operations and their results'
names, the fixtures it runs on and the modes it runs each in (a head's ``causal``,
multi-head attention's ``causal`` and ``rope``), how a fixture becomes the arguments of
a call, which forward results the gradient check's objective weighs and with which
upstream gradients (the backward's), the names its families publish (``head-replay``;
RoPE's forward is ``rope``), the inputs its shapes and errors families send, and how a
wrong result is diagnosed (:mod:`~qkvcli.check.diagnose`, :mod:`~qkvcli.check.reference`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.check.cases import Case, Run, cache_cases, mha_cases, rope_cases
from qkvcli.core.arrays import Array
from qkvcli.core.errors import format_shape
from qkvcli.core.invariants import HeadLayout
from qkvcli.core.names import BRANCHES, GRADIENTS
from qkvcli.core.record import Record

if TYPE_CHECKING:
    from qkvcli.check.diagnose import Bundle, Explain, Precision
from qkvcli.protocol.wire import (
    CACHE_STEPS_NAMES,
    HEAD_BACKWARD_NAMES,
    HEAD_FORWARD_NAMES,
    LAYER_GRADIENT_RECORDS,
    LAYER_RECORDS,
    MHA_BACKWARD_NAMES,
    MHA_FORWARD_NAMES,
    OPERAND_BACKWARD_NAMES,
    OPERAND_FORWARD_NAMES,
    ROPE_REVERSE_NAMES,
)

Shape = tuple[int, ...]
Request = tuple[str, tuple[str, ...]]
"""A bad request as data: its code (the renderer's ``REQUEST_WORDS``) and facts."""
BadRequest = tuple[Request, str, tuple[Any, ...]]
"""A request the implementation must reject: the request, the operation, its arguments."""
Faults = Callable[[tuple[str, ...], tuple[Array, ...], tuple[Array, ...], float],
                  "list[tuple[str, Precision]] | None"]
Arguments = Callable[[Case, Any, tuple[Array, ...], tuple[Array, ...] | None], tuple[Any, ...]]
"""A call's arguments in the interface's order, from the fixture, the mode, the tensors
(the input first, then the weights) and the upstream gradients (``None``: a forward)."""


def _diagnosis(name: str) -> Any:
    """The function ``name`` of :mod:`~qkvcli.check.diagnose`, imported at its first call:
    a plan that never diagnoses a wrong result (chapter 26's, on qkv's engine) loads none
    of it."""

    def diagnosis(*args: Any) -> Any:
        from qkvcli.check import diagnose

        return getattr(diagnose, name)(*args)

    return diagnosis


def _slips(name: str) -> Explain:
    """The explanation ``name`` of :mod:`~qkvcli.check.reference` (a head's, RoPE's or
    multi-head attention's slips), imported at its first call: the attention engine they
    are computed by is loaded only when an implementation offers such a kind."""

    def explain(run: Run, got: Bundle, expected: Bundle, index: int, mismatch: Any,
                tolerance: float) -> Any:
        from qkvcli.check import reference

        return getattr(reference, name)(run, got, expected, index, mismatch, tolerance)

    return explain


class Probe(Record):
    """An input the shapes family sends: ``what`` it probes (``empty batch``), ``where``
    a failure on it is said to be, the input, and its backward's upstream gradients."""

    what: str
    where: str
    x: Array
    upstream: tuple[Array, ...]


class Kind(Record):
    """One kind of operation, as the families shared by every kind need it.

    ``prefix`` starts its family names and its own not-run reasons (``head-lossy``),
    ``published`` names a family otherwise (RoPE's ``forward`` is ``rope``); ``modes``
    are the modes each fixture runs in (``None``: the kind takes none), ``label`` says a
    run of a fixture in one (``chapter causal``), ``arguments`` builds a call's. ``loss``
    are the forward results the gradient check's objective weighs, each by the upstream
    gradient of ``upstream`` (the fixture's, by position) in the same place: the
    backward's upstream. ``probes`` and ``requests`` are the inputs the shapes and errors
    families send (with ``True``, the backward's requests too); ``precision`` gives a
    forward's faults when it is right but for its precision, and ``explain_forward``,
    ``explain_backward`` say why a result is wrong otherwise (the kind's known slips).
    ``fixtures`` gives the kind's own fixtures (``None``: the check's, which the
    projections and a head share); ``attention`` where an attention matrix is among the
    forward's results (a kind with one has the prefix and single-token claims); a kind
    whose bad requests do not depend on the fixture makes them once, under
    ``requests_label``.
    """

    prefix: str
    forward: str
    backward: str
    forward_names: tuple[str, ...]
    backward_names: tuple[str, ...]
    modes: tuple[Any, ...]
    label: Callable[[Case, Any], str]
    arguments: Arguments
    loss: tuple[int, ...]
    upstream: tuple[int, ...]
    probes: Callable[[Case], list[Probe]]
    requests: Callable[[Case, bool], list[BadRequest]]
    precision: Faults
    explain_forward: Explain
    explain_backward: Explain
    heads: bool = False  # also takes the fixtures that probe a head alone (contrast)
    fixtures: Callable[[], list[Case]] | None = None
    attention: int | None = None  # where its attention matrix is among the forward's results
    published: tuple[tuple[str, str], ...] = ()
    requests_label: str = ""  # its requests do not depend on the fixture: made once, so said
    # The shapes its results must have, forward's then backward's, for an input and the
    # weights: the rule the shapes family judges by (``None``: the engine's shapes).
    shape_rule: Callable[[Array, tuple[Array, ...]], tuple[Shape, ...]] | None = None
    # The backward's results only the scores reach (a head's dW_Q, dW_K): 0 for one token
    score_gradients: tuple[int, ...] = (1, 2)
    # How a case's layer splits into heads (a kind with heads: head isolation)
    layout: Callable[[Case], HeadLayout] | None = None
    # Results that hold -inf by design, where a mask hides a key (not judged finite)
    unbounded: tuple[str, ...] = ()
    # Why a result is wrong by relation alone (no catalogued slip): where the fixtures
    # do not agree on the slip that explain_forward or explain_backward named
    relate_forward: Explain | None = None
    relate_backward: Explain | None = None

    def takes(self, case: Case) -> bool:
        """Whether the kind's families run on ``case`` (one of the check's fixtures): a
        later chapter's fixture is a case of the kinds it names, any other of the kinds
        without fixtures of their own (a head's also of the contrast one)."""
        if case.kinds:
            return self.forward in case.kinds
        return self.heads or not case.heads_only

    def family(self, name: str) -> str:
        """The published name of the kind's ``name`` (``replay``: ``head-replay``)."""
        return dict(self.published).get(name, self.prefix + name)

    @property
    def upstream_names(self) -> tuple[str, ...]:
        """The backward's upstream arguments: ``grad_query``..., a head's ``grad_output``."""
        return tuple(f"grad_{self.forward_names[index]}" for index in self.loss)

    def runs(self, case: Case) -> list[Run]:
        """``case`` in each mode, labelled ``chapter non-causal``, ``chapter causal`` (the
        projections': ``chapter``)."""
        return [self._run(case, mode, self.label(case, mode)) for mode in self.modes]

    def run(self, case: Case) -> Run:
        """``case`` once, in the last mode (a head's causal), labelled as the fixture."""
        return self._run(case, self.modes[-1], case.label)

    def _run(self, case: Case, mode: Any, label: str) -> Run:
        return Run(case, mode, label, tuple(case.upstream[index] for index in self.upstream))

    def call_arguments(self, run: Run, tensors: tuple[Array, ...] | None = None,
                       upstream: tuple[Array, ...] | None = None) -> tuple[Any, ...]:
        """The arguments of the kind's forward on the run (``tensors``: the input and the
        weights instead of the fixture's), or of its backward given ``upstream``."""
        return self.arguments(run.case, run.mode, run.case.tensors if tensors is None
                              else tensors, upstream)


def _label_of(case: Case, mode: Any) -> str:
    """The fixture's label: a kind without modes runs each fixture once."""
    return case.label


def _causal_label(case: Case, mode: bool) -> str:
    return f"{case.label} {'causal' if mode else 'non-causal'}"


def _mha_label(case: Case, mode: tuple[bool, bool]) -> str:
    """``mha[...] causal rope``: the fixture with and without the mask and RoPE."""
    causal, rope = mode
    return " ".join((_causal_label(case, causal), *(("rope",) if rope else ())))


def _projection_arguments(case: Case, mode: None, tensors: tuple[Array, ...],
                          upstream: tuple[Array, ...] | None) -> tuple[Any, ...]:
    return (*tensors, *(upstream or ()))


def _head_arguments(case: Case, mode: bool, tensors: tuple[Array, ...],
                    upstream: tuple[Array, ...] | None) -> tuple[Any, ...]:
    """A head's ``causal`` comes after the weights, as in its Python signature."""
    return (*tensors, mode, *(upstream or ()))


def _rope_arguments(case: Case, mode: None, tensors: tuple[Array, ...],
                    upstream: tuple[Array, ...] | None) -> tuple[Any, ...]:
    """``rope(x, base, offset)``; ``rope_reverse`` turns the upstream gradient back."""
    return (tensors[0] if upstream is None else upstream[0], case.base, case.offset)


def _mha_arguments(case: Case, mode: tuple[bool, bool], tensors: tuple[Array, ...],
                   upstream: tuple[Array, ...] | None) -> tuple[Any, ...]:
    causal, rope = mode
    return (*tensors, case.heads, causal, rope, case.base, case.offset, *(upstream or ()))


def _projection_probes(case: Case) -> list[Probe]:
    """An empty batch ``[0,T,d]``, no tokens ``[2B,0,d]`` and ``[B,0,d]`` (zeros), and
    the batch doubled (the input twice, concatenated), with zero upstream gradients,
    said at their shape; an empty axis of the fixture's is taken as 1 here, so that each
    probe empties one axis only."""
    batch, tokens, d_model, d_head = case.shape
    probes = []
    for what, x in (("empty batch", np.zeros((0, max(tokens, 1), d_model))),
                    ("no tokens", np.zeros((2 * max(batch, 1), 0, d_model))),
                    ("no tokens", np.zeros((max(batch, 1), 0, d_model))),
                    ("batch doubled", np.concatenate([case.input, case.input], axis=0))):
        upstream = tuple(np.broadcast_to(0.0, (*x.shape[:2], d_head)) for _ in BRANCHES)
        probes.append(Probe(what, format_shape(list(x.shape)), x, upstream))
    return probes


def _projection_shapes(x: Array, weights: tuple[Array, ...]) -> tuple[Shape, ...]:
    """The chapter's rule: Q, K and V keep the batch and token axes at width ``d_head``,
    and each gradient has its tensor's shape."""
    d_model, d_head = (int(size) for size in weights[0].shape)
    kept = (*(int(size) for size in x.shape[:2]), d_head)
    return (kept, kept, kept, tuple(int(size) for size in x.shape),
            *((d_model, d_head),) * 3)


def _named_probes(width: int, out: int) -> list[Probe]:
    """An empty batch, no tokens and one token (every input 0.5, upstream ones), said by
    name: ``width`` features in, ``out`` out."""
    return [Probe(what, what, np.zeros((batch, tokens, width)) + 0.5,
                  (np.ones((batch, tokens, out)),))
            for what, batch, tokens in (("empty batch", 0, 2), ("no tokens", 1, 0),
                                        ("one token", 1, 1))]


def _head_probes(case: Case) -> list[Probe]:
    _, _, d_model, d_head = case.shape
    return _named_probes(d_model, d_head)


def _same_width_probes(case: Case) -> list[Probe]:
    """RoPE's and multi-head attention's: the output as wide as the input."""
    width = int(case.input.shape[-1])
    return _named_probes(width, width)


def _kept_shape(x: Array, weights: tuple[Array, ...]) -> tuple[Shape, ...]:
    """RoPE's rule: the rotation and its reverse keep the input's shape."""
    shape = tuple(int(size) for size in x.shape)
    return shape, shape


def _ones(*shape: int) -> Array:
    """A read-only array of ones of ``shape`` that holds one number."""
    return np.broadcast_to(1.0, shape)


def _projection_requests(case: Case, backward: bool) -> list[BadRequest]:
    """The input's rank and width, weights of different model or head widths; with
    ``backward`` the same input's rank and width to backward, and upstream gradients of
    the wrong tokens or head width."""
    batch, tokens, d_model, d_head = (max(size, 1) for size in case.shape)
    # Read-only views of one 1.0 (at a fixture's size they would cost its memory; a call
    # that judges purity gets its own copies, as of any argument).
    x, w, up = (_ones(batch, tokens, d_model), _ones(d_model, d_head),
                _ones(batch, tokens, d_head))
    wider = _ones(batch, tokens, d_model + 1)
    requests: list[BadRequest] = [
        (("rank-2", (format_shape([tokens, d_model]),)), "forward", (x[0], w, w, w)),
        (("input-width", (str(d_model + 1), str(d_model))), "forward", (wider, w, w, w)),
        (("model-widths", (str(d_model), str(d_model + 1))), "forward",
         (x, w, _ones(d_model + 1, d_head), w)),
        (("head-widths", (str(d_head), str(d_head + 1))), "forward",
         (x, w, _ones(d_model, d_head + 1), w)),
    ]
    if backward:
        longer, wider_head = (batch, tokens + 1, d_head), (batch, tokens, d_head + 1)
        requests += [
            (("backward-rank-2", (format_shape([tokens, d_model]),)), "backward",
             (x[0], w, w, w, up, up, up)),
            (("backward-input-width", (str(d_model + 1), str(d_model))), "backward",
             (wider, w, w, w, up, up, up)),
            (("backward-grad-key", (format_shape(list(longer)), str(tokens))), "backward",
             (x, w, w, w, up, _ones(*longer), up)),
            (("backward-grad-value", (format_shape(list(wider_head)), str(d_head))),
             "backward", (x, w, w, w, up, up, _ones(*wider_head))),
        ]
    return requests


def _head_requests(case: Case, backward: bool) -> list[BadRequest]:
    """The input's rank and width, mismatched head widths; with ``backward`` a grad_output
    of the wrong tokens."""
    batch, tokens, d_model, d_head = (max(size, 1) for size in case.shape)
    x, w = np.ones((batch, tokens, d_model)), np.ones((d_model, d_head))
    requests: list[BadRequest] = [
        (("rank-2", (format_shape([tokens, d_model]),)), "head_forward", (x[0], w, w, w, True)),
        (("input-width", (str(d_model + 1), str(d_model))), "head_forward",
         (np.ones((batch, tokens, d_model + 1)), w, w, w, True)),
        (("key-width", (str(d_head + 1), str(d_head))), "head_forward",
         (x, w, np.ones((d_model, d_head + 1)), w, True)),
    ]
    if backward:
        longer = (batch, tokens + 1, d_head)
        requests.append((("grad-output", (format_shape(list(longer)), str(tokens))),
                         "head_backward", (x, w, w, w, True, np.ones(longer))))
    return requests


def _rope_requests(case: Case, backward: bool) -> list[BadRequest]:
    """An odd width, no width, a rank-1 input, a base of 0 or below, a negative offset;
    with ``backward`` an odd width to ``rope_reverse`` too."""
    ones = np.ones((1, 3, 4))
    requests: list[BadRequest] = [
        (("rope-odd-width", ("3",)), "rope", (np.ones((1, 3, 3)), 100.0, 0)),
        (("rope-zero-width", ()), "rope", (np.ones((1, 3, 0)), 100.0, 0)),
        (("rope-rank-1", ("[4]",)), "rope", (np.ones(4), 100.0, 0)),
        (("rope-base", ("0",)), "rope", (ones, 0.0, 0)),
        (("rope-base", ("-10",)), "rope", (ones, -10.0, 0)),
        (("rope-offset", ("-1",)), "rope", (ones, 100.0, -1)),
    ]
    if backward:
        requests.append((("rope-reverse-odd-width", ("3",)), "rope_reverse",
                         (np.ones((1, 3, 3)), 100.0, 0)))
    return requests


def _mha_requests(case: Case, backward: bool) -> list[BadRequest]:
    """All ones, ``[1,3,4]``, causal with RoPE: a head count that does not divide
    ``d_model``, no heads, an odd head width with RoPE, ``W_O`` of the wrong rows, an
    input width that is not the weights' rows; with ``backward`` a grad_output of the
    wrong tokens."""
    x, w = np.ones((1, 3, 4)), np.ones((4, 4))
    wide = np.ones((6, 6))
    requests: list[BadRequest] = [
        (("mha-heads", ("3", "4")), "mha_forward", (x, w, w, w, w, 3, True, True, 100.0, 0)),
        (("mha-no-heads", ()), "mha_forward", (x, w, w, w, w, 0, True, True, 100.0, 0)),
        (("mha-odd-head", ("3",)), "mha_forward", (np.ones((1, 3, 6)), wide, wide, wide, wide,
                                                   2, True, True, 100.0, 0)),
        (("mha-output-rows", ("5", "4")), "mha_forward",
         (x, w, w, w, np.ones((5, 4)), 2, True, True, 100.0, 0)),
        (("input-width", ("5", "4")), "mha_forward",
         (np.ones((1, 3, 5)), w, w, w, w, 2, True, True, 100.0, 0)),
    ]
    if backward:
        requests.append((("grad-output", ("[1,4,4]", "3")), "mha_backward",
                         (x, w, w, w, w, 2, True, True, 100.0, 0, np.ones((1, 4, 4)))))
    return requests


PROJECTIONS = Kind(
    prefix="", forward="forward", backward="backward", forward_names=BRANCHES,
    backward_names=GRADIENTS, modes=(None,), label=_label_of,
    arguments=_projection_arguments, loss=(0, 1, 2), upstream=(0, 1, 2),
    probes=_projection_probes, requests=_projection_requests,
    precision=_diagnosis("first_precision_fault"),  # outputs computed apart: the first wrong one alone
    explain_forward=_diagnosis("explain_outputs"),
    explain_backward=_diagnosis("explain_gradients"),
    shape_rule=_projection_shapes)
"""The chapter's Q/K/V projections: ``query``, ``key``, ``value`` and the four gradients."""

HEAD = Kind(
    prefix="head-", forward="head_forward", backward="head_backward",
    forward_names=HEAD_FORWARD_NAMES, backward_names=HEAD_BACKWARD_NAMES,
    modes=(False, True), label=_causal_label, arguments=_head_arguments,
    loss=(2,), upstream=(2,),  # grad_output: the output's, the value's upstream
    probes=_head_probes, requests=_head_requests,
    precision=_diagnosis("precision_faults"),  # scores, weights, output come from one another: together
    explain_forward=_slips("explain_head_forward"),
    explain_backward=_slips("explain_head_backward"), heads=True, attention=1,
    relate_forward=_slips("relate_head_forward"),
    relate_backward=_slips("relate_head_backward"))
"""One attention head: ``scores``, ``weights``, ``output``, and the four gradients."""

ROPE = Kind(
    prefix="rope-", forward="rope", backward="rope_reverse", forward_names=("rope",),
    backward_names=ROPE_REVERSE_NAMES, modes=(None,), label=_label_of,
    arguments=_rope_arguments, loss=(0,), upstream=(0,),
    probes=_same_width_probes, requests=_rope_requests, precision=_diagnosis("precision_faults"),
    explain_forward=_slips("explain_rope"), explain_backward=_slips("explain_rope_reverse"),
    relate_forward=_slips("relate_rope"), relate_backward=_slips("relate_rope_reverse"),
    fixtures=rope_cases, published=(("forward", "rope"),), requests_label="rope requests",
    shape_rule=_kept_shape)
"""RoPE: ``rope(x, base, offset)`` and its reverse, ``rope_reverse(upstream, base, offset)``
(the rotation's transpose, which carries a gradient back through it)."""

def _mha_layout(case: Case) -> HeadLayout:
    """``heads`` heads, each K/V head its own, their widths the weights' columns per head
    (a chapter's layer may project to another width than its input's)."""
    size, value_size = (int(case.weights[index].shape[1]) // case.heads for index in (0, 2))
    return HeadLayout(case.heads, case.heads, size, value_size)


MULTI_HEAD = Kind(
    prefix="multi-head-", forward="mha_forward", backward="mha_backward",
    forward_names=MHA_FORWARD_NAMES, backward_names=MHA_BACKWARD_NAMES,
    modes=((False, False), (True, False), (False, True), (True, True)), label=_mha_label,
    arguments=_mha_arguments, loss=(2,), upstream=(0,),  # the output's upstream gradient
    probes=_same_width_probes, requests=_mha_requests, precision=_diagnosis("precision_faults"),
    explain_forward=_slips("explain_mha_forward"), explain_backward=_slips("explain_mha_backward"),
    relate_forward=_slips("relate_mha_forward"), relate_backward=_slips("relate_mha_backward"),
    fixtures=mha_cases, attention=0, published=(("forward", "multi-head"),),
    requests_label="mha requests", layout=_mha_layout)
"""Multi-head attention: ``weights``, ``merged``, ``output``, and the five gradients, each
fixture without and with the mask and RoPE."""

def _none(*args: Any) -> Any:
    """No diagnosis: the engine-only kind is never compared with a reference."""
    return None


def cache_capacity(case: Case, x: Array) -> int:
    """The positions of the cache ``x`` is fed into: the case's own (a chapter 37
    fixture's), else room for every token of ``x``."""
    return case.capacity or max(int(x.shape[1]), 1)


def _cache_arguments(case: Case, mode: None, tensors: tuple[Array, ...],
                     upstream: tuple[Array, ...] | None) -> tuple[Any, ...]:
    """``cache_steps(x, W_Q, W_K, W_V, W_O, heads, base, capacity, step)``: the case's
    capacity, one token a step."""
    return (*tensors, case.heads, case.base, cache_capacity(case, tensors[0]), 1)


def _cache_requests(case: Case, backward: bool) -> list[BadRequest]:
    """All ones, ``[1,3,4]``, room for three tokens, one a step: a rank-2 input, a head
    count that does not divide ``d_model``, no heads, heads of odd width (RoPE turns
    pairs), ``W_O`` of the wrong rows, an input width that is not the weights' rows."""
    x, w = np.ones((1, 3, 4)), np.ones((4, 4))
    wide = np.ones((6, 6))
    return [
        (("rank-2", ("[3,4]",)), "cache_steps", (np.ones((3, 4)), w, w, w, w, 2, 100.0, 3, 1)),
        (("mha-heads", ("3", "4")), "cache_steps", (x, w, w, w, w, 3, 100.0, 3, 1)),
        (("mha-no-heads", ()), "cache_steps", (x, w, w, w, w, 0, 100.0, 3, 1)),
        (("mha-odd-head", ("3",)), "cache_steps",
         (np.ones((1, 3, 6)), wide, wide, wide, wide, 2, 100.0, 3, 1)),
        (("mha-output-rows", ("5", "4")), "cache_steps",
         (x, w, w, w, np.ones((5, 4)), 2, 100.0, 3, 1)),
        (("input-width", ("5", "4")), "cache_steps",
         (np.ones((1, 3, 5)), w, w, w, w, 2, 100.0, 3, 1)),
    ]


CACHE_STEPS = Kind(
    prefix="cache-", forward="cache_steps", backward="", forward_names=CACHE_STEPS_NAMES,
    backward_names=(), modes=(None,), label=_label_of, arguments=_cache_arguments, loss=(0,),
    upstream=(), probes=lambda case: [], requests=_cache_requests, precision=_none,
    explain_forward=_none, explain_backward=_none, fixtures=cache_cases,
    requests_label="cache requests")
"""A learner's KV cache: ``cache_steps(x, w_query, w_key, w_value, w_output, heads, base,
capacity, step) -> (output, keys, values, lengths)``, a reset cache of ``capacity``
positions fed ``step`` tokens of ``x`` at a time (a refused step leaves it as it was).
Its families: each step against the engine's causal pass, refused steps, bad requests,
replay, purity (:mod:`qkvcli.check.incremental`)."""

KINDS = (PROJECTIONS, HEAD, ROPE, MULTI_HEAD, CACHE_STEPS)
"""Every kind, in report order."""


LAYER = Kind(
    prefix="layer-", forward="layer_forward", backward="layer_backward",
    forward_names=("output",), backward_names=(), modes=(True,), label=_label_of,
    arguments=lambda case, mode, tensors, upstream: (tensors[0],), loss=(0,), upstream=(),
    probes=lambda case: [], requests=lambda case, backward: [], precision=_none,
    explain_forward=_none, explain_backward=_none)
"""A real layer as qkv's engine offers it (``layer_forward(x) -> output``, its mask and
parameters its own): the kind of attend's claims that need only the layer's answers (the
prefix). Only the engine offers it; never a learner's kind."""

WEIGHED_LAYER = LAYER._replace(
    forward="layer_weighed", forward_names=("weights", "output"),
    backward_names=("input_gradient", "reached"), loss=(1,), attention=0, score_gradients=(1,),
    arguments=lambda case, mode, tensors, upstream: (tensors[0], *(upstream or ())))
"""The same layer with its attention weights (``layer_weighed(x) -> (weights, output)``)
and its backward (``layer_backward(x, grad_output) -> (input_gradient, reached)``, where
``reached`` is every gradient only the scores reach, flattened into one: the query's and
the key's weights, biases and norms): the kind of attend's single-token claim and shape
probes."""

PASS_LAYER = LAYER._replace(
    forward="layer_pass", backward="layer_pass_backward", forward_names=LAYER_RECORDS,
    backward_names=LAYER_GRADIENT_RECORDS, loss=(LAYER_RECORDS.index("output"),),
    upstream=(0,), unbounded=("scaled_scores",),
    arguments=lambda case, mode, tensors, upstream: (tensors[0], *(upstream or ())))
"""The same layer's whole pass (``layer_pass(x)``: every array of its forward, ``Q``, ``K``,
``V`` by head, the scores, the weights, the merged heads, the output;
``layer_pass_backward(x, grad_output)``: every gradient of its reverse; an empty array for
what the layer has not; the scaled scores hold -inf where the mask hides a key): the
kind of attend's forward, reverse and replay."""

HEADS_LAYER = LAYER._replace(
    forward="layer_heads", forward_names=("weights", "merged"),
    arguments=lambda case, mode, tensors, upstream: tensors)
"""The same layer given other projection weights (``layer_heads(x, w_query, w_key,
w_value) -> (weights, merged)``: its heads' attention weights and outputs merged before
the output projection): the kind of attend's head isolation, with the layer's
``layout``."""


def _operand_arguments(case: Case, mode: bool, tensors: tuple[Array, ...],
                       upstream: tuple[Array, ...] | None) -> tuple[Any, ...]:
    """The input ``[Q|K|V]`` split at the case's query width into ``query, key, value``."""
    joined, width = tensors[0], case.query_width
    return (joined[..., :width], joined[..., width:2 * width], joined[..., 2 * width:], mode,
            *(upstream or ()))


def operand_head(causal: bool, query_width: int) -> Kind:
    """One head on given ``Q``, ``K``, ``V`` as qkv's engine offers it (chapters 27 and 28:
    ``causal`` their mask): a case's input is ``[Q|K|V]`` (split at its ``query_width``),
    its upstream the output's. Only the engine offers it; never a learner's kind. Its
    shapes are judged by its rule: every score and weight ``[B,T,T]``, the output as wide
    as ``V`` (the input past ``2 query_width``), each gradient its operand's shape."""

    def rule(x: Array, weights: tuple[Array, ...]) -> tuple[Shape, ...]:
        batch, tokens, joined = (int(size) for size in x.shape)
        square, query = (batch, tokens, tokens), (batch, tokens, query_width)
        value = (batch, tokens, joined - 2 * query_width)
        return (square, square, square, square, value, query, query, value, square, square,
                square)

    return Kind(
        prefix="operands-", forward="operands_forward", backward="operands_backward",
        forward_names=OPERAND_FORWARD_NAMES, backward_names=OPERAND_BACKWARD_NAMES,
        modes=(causal,), label=_label_of, arguments=_operand_arguments, loss=(4,),
        upstream=(0,), probes=lambda case: [], requests=lambda case, backward: [],
        precision=_none, explain_forward=_none, explain_backward=_none, attention=3,
        score_gradients=(0, 1), shape_rule=rule)

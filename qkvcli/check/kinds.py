"""The two kinds of operation ``qkv check`` judges, as data: the chapter's projections
(``forward``, ``backward``) and one attention head (``head_forward``, ``head_backward``).

A family both kinds share is written once over a :class:`Kind`: the operations and
their results' names, how a fixture becomes the arguments of a call (a head adds
``causal`` after the weights and runs each fixture in both modes; its one upstream
gradient, the output's, is the fixture's value upstream), the names its families and
reasons publish (``replay``, ``head-replay``), the inputs its shapes and errors
families send, and how a wrong result is diagnosed (:mod:`~qkvcli.check.diagnose`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from qkvcli.check.cases import Case, Run
from qkvcli.check.diagnose import (
    Bundle,
    Explain,
    Precision,
    explain_gradients,
    explain_head_backward,
    explain_head_forward,
    explain_outputs,
    first_precision_fault,
    precision_faults,
)
from qkvcli.check.wire import HEAD_BACKWARD_NAMES, HEAD_FORWARD_NAMES
from qkvcli.core.arrays import Array
from qkvcli.core.errors import format_shape
from qkvcli.core.names import BRANCHES, GRADIENTS
from qkvcli.core.record import Record

Request = tuple[str, tuple[str, ...]]
"""A bad request as data: its code (the renderer's ``REQUEST_WORDS``) and facts."""
BadRequest = tuple[Request, Array, tuple[Array, ...], tuple[Array, ...] | None]
"""A request the implementation must reject: the request, the input, the weights and
the upstream gradients (``None``: a forward)."""
Faults = Callable[[tuple[str, ...], Bundle, Bundle, float], list[tuple[str, Precision]] | None]


class Probe(Record):
    """An input the shapes family sends: ``what`` it probes (``empty batch``), ``where``
    a failure on it is said to be, the input, and its backward's upstream gradients."""

    what: str
    where: str
    x: Array
    upstream: tuple[Array, ...]


class Kind(Record):
    """One kind of operation, as the families shared by both kinds need it.

    ``prefix`` starts its family names and its own not-run reasons (``head-lossy``);
    ``modes`` are the ``causal`` flags each fixture runs with (``None``: the kind takes
    none); ``loss`` the forward results the gradient check's objective weighs, each by
    the fixture's upstream gradient in the same place: the backward's upstream. ``probes``
    and ``requests`` are the inputs the shapes and errors families send (with ``True``,
    the backward's requests too); ``precision`` gives a forward's faults when it is right
    but for its precision, and ``explain_forward``, ``explain_backward`` say why a result
    is wrong otherwise (the kind's known slips).
    """

    prefix: str
    forward: str
    backward: str
    forward_names: tuple[str, ...]
    backward_names: tuple[str, ...]
    modes: tuple[bool | None, ...]
    loss: tuple[int, ...]
    probes: Callable[[Case], list[Probe]]
    requests: Callable[[Case, bool], list[BadRequest]]
    precision: Faults
    explain_forward: Explain
    explain_backward: Explain
    heads: bool = False  # also takes the fixtures that probe a head alone (contrast)

    def takes(self, case: Case) -> bool:
        """Whether the kind's families run on ``case``."""
        return self.heads or not case.heads_only

    def family(self, name: str) -> str:
        """The published name of the kind's ``name`` (``replay``: ``head-replay``)."""
        return self.prefix + name

    @property
    def upstream_names(self) -> tuple[str, ...]:
        """The backward's upstream arguments: ``grad_query``..., a head's ``grad_output``."""
        return tuple(f"grad_{self.forward_names[index]}" for index in self.loss)

    def runs(self, case: Case) -> list[Run]:
        """``case`` in each mode, labelled ``chapter non-causal``, ``chapter causal`` (the
        projections': ``chapter``)."""
        return [self._run(case, mode, case.label if mode is None else
                          " ".join((case.label, "causal" if mode else "non-causal")))
                for mode in self.modes]

    def run(self, case: Case) -> Run:
        """``case`` once, in the last mode (a head's causal), labelled as the fixture."""
        return self._run(case, self.modes[-1], case.label)

    def _run(self, case: Case, mode: bool | None, label: str) -> Run:
        return Run(case, mode, label, tuple(case.upstream[index] for index in self.loss))


def _projection_probes(case: Case) -> list[Probe]:
    """An empty batch and no tokens (zeros; zero upstream gradients), said at their shape."""
    batch, tokens, d_model, d_head = case.shape
    probes = []
    for what, x in (("empty batch", np.zeros((0, max(tokens, 1), d_model))),
                    ("no tokens", np.zeros((max(batch, 1), 0, d_model)))):
        upstream = tuple(np.zeros((*x.shape[:2], d_head)) for _ in BRANCHES)
        probes.append(Probe(what, format_shape(list(x.shape)), x, upstream))
    return probes


def _head_probes(case: Case) -> list[Probe]:
    """An empty batch, no tokens and one token (every input 0.5, grad_output ones), said
    by name."""
    _, _, d_model, d_head = case.shape
    return [Probe(what, what, np.zeros((batch, tokens, d_model)) + 0.5,
                  (np.ones((batch, tokens, d_head)),))
            for what, batch, tokens in (("empty batch", 0, 2), ("no tokens", 1, 0),
                                        ("one token", 1, 1))]


def _projection_requests(case: Case, backward: bool) -> list[BadRequest]:
    """The input's rank and width, weights of different model or head widths; with
    ``backward`` the same input's rank and width to backward, and upstream gradients of
    the wrong tokens or head width."""
    batch, tokens, d_model, d_head = (max(size, 1) for size in case.shape)
    x, w, up = (np.ones((batch, tokens, d_model)), np.ones((d_model, d_head)),
                np.ones((batch, tokens, d_head)))
    wider = np.ones((batch, tokens, d_model + 1))
    requests: list[BadRequest] = [
        (("rank-2", (format_shape([tokens, d_model]),)), x[0], (w, w, w), None),
        (("input-width", (str(d_model + 1), str(d_model))), wider, (w, w, w), None),
        (("model-widths", (str(d_model), str(d_model + 1))), x,
         (w, np.ones((d_model + 1, d_head)), w), None),
        (("head-widths", (str(d_head), str(d_head + 1))), x,
         (w, np.ones((d_model, d_head + 1)), w), None),
    ]
    if backward:
        longer, wider_head = (batch, tokens + 1, d_head), (batch, tokens, d_head + 1)
        requests += [
            (("backward-rank-2", (format_shape([tokens, d_model]),)), x[0], (w, w, w),
             (up, up, up)),
            (("backward-input-width", (str(d_model + 1), str(d_model))), wider, (w, w, w),
             (up, up, up)),
            (("backward-grad-key", (format_shape(list(longer)), str(tokens))), x, (w, w, w),
             (up, np.ones(longer), up)),
            (("backward-grad-value", (format_shape(list(wider_head)), str(d_head))), x,
             (w, w, w), (up, up, np.ones(wider_head))),
        ]
    return requests


def _head_requests(case: Case, backward: bool) -> list[BadRequest]:
    """The input's rank and width, mismatched head widths; with ``backward`` a grad_output
    of the wrong tokens."""
    batch, tokens, d_model, d_head = (max(size, 1) for size in case.shape)
    x, w = np.ones((batch, tokens, d_model)), np.ones((d_model, d_head))
    requests: list[BadRequest] = [
        (("rank-2", (format_shape([tokens, d_model]),)), x[0], (w, w, w), None),
        (("input-width", (str(d_model + 1), str(d_model))),
         np.ones((batch, tokens, d_model + 1)), (w, w, w), None),
        (("key-width", (str(d_head + 1), str(d_head))), x,
         (w, np.ones((d_model, d_head + 1)), w), None),
    ]
    if backward:
        longer = (batch, tokens + 1, d_head)
        requests.append((("grad-output", (format_shape(list(longer)), str(tokens))), x,
                         (w, w, w), (np.ones(longer),)))
    return requests


PROJECTIONS = Kind(
    prefix="", forward="forward", backward="backward", forward_names=BRANCHES,
    backward_names=GRADIENTS, modes=(None,), loss=(0, 1, 2),
    probes=_projection_probes, requests=_projection_requests,
    precision=first_precision_fault,  # outputs computed apart: the first wrong one alone
    explain_forward=explain_outputs, explain_backward=explain_gradients)
"""The chapter's Q/K/V projections: ``query``, ``key``, ``value`` and the four gradients."""

HEAD = Kind(
    prefix="head-", forward="head_forward", backward="head_backward",
    forward_names=HEAD_FORWARD_NAMES, backward_names=HEAD_BACKWARD_NAMES,
    modes=(False, True), loss=(2,),  # grad_output: the output's, the value's upstream
    probes=_head_probes, requests=_head_requests,
    precision=precision_faults,  # scores, weights, output come from one another: together
    explain_forward=explain_head_forward, explain_backward=explain_head_backward, heads=True)
"""One attention head: ``scores``, ``weights``, ``output``, and the four gradients."""

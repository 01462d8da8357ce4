"""The two kinds of operation ``qkv check`` judges, as data: the chapter's projections
(``forward``, ``backward``) and one attention head (``head_forward``, ``head_backward``).

A family both kinds share is written once over a :class:`Kind`: the operations and
their results' names, how a fixture becomes the arguments of a call (a head adds
``causal`` after the weights and runs each fixture in both modes; its one upstream
gradient, the output's, is the fixture's value upstream), the names its families and
reasons publish (``replay``, ``head-replay``), and how a wrong result is diagnosed
(:mod:`~qkvcli.check.diagnose`).
"""

from __future__ import annotations

from collections.abc import Callable

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
from qkvcli.core.names import BRANCHES, GRADIENTS
from qkvcli.core.record import Record

Faults = Callable[[tuple[str, ...], Bundle, Bundle, float], list[tuple[str, Precision]] | None]


class Kind(Record):
    """One kind of operation, as the families shared by both kinds need it.

    ``prefix`` starts its family names and its own not-run reasons (``head-lossy``);
    ``modes`` are the ``causal`` flags each fixture runs with (``None``: the kind takes
    none); ``loss`` the forward results the gradient check's objective weighs, each by
    the fixture's upstream gradient in the same place: the backward's upstream.
    ``precision`` gives a forward's faults when it is right but for its precision, and
    ``explain_forward``, ``explain_backward`` say why a result is wrong otherwise (the
    kind's known slips).
    """

    prefix: str
    forward: str
    backward: str
    forward_names: tuple[str, ...]
    backward_names: tuple[str, ...]
    modes: tuple[bool | None, ...]
    loss: tuple[int, ...]
    precision: Faults
    explain_forward: Explain
    explain_backward: Explain

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


PROJECTIONS = Kind(
    prefix="", forward="forward", backward="backward", forward_names=BRANCHES,
    backward_names=GRADIENTS, modes=(None,), loss=(0, 1, 2),
    precision=first_precision_fault,  # outputs computed apart: the first wrong one alone
    explain_forward=explain_outputs, explain_backward=explain_gradients)
"""The chapter's Q/K/V projections: ``query``, ``key``, ``value`` and the four gradients."""

HEAD = Kind(
    prefix="head-", forward="head_forward", backward="head_backward",
    forward_names=HEAD_FORWARD_NAMES, backward_names=HEAD_BACKWARD_NAMES,
    modes=(False, True), loss=(2,),  # grad_output: the output's, the value's upstream
    precision=precision_faults,  # scores, weights, output come from one another: together
    explain_forward=explain_head_forward, explain_backward=explain_head_backward)
"""One attention head: ``scores``, ``weights``, ``output``, and the four gradients."""

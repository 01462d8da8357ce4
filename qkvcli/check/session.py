"""One check's calls: fresh argument copies, purity records, and the results every family shares.

Every call gets its own writeable copies of the arguments; for a Python implementation
the copies are compared with the originals after the call, and any change is kept
as a ``purity`` failure (a ``--command`` program only ever sees serialized copies).
The first forward and backward of each fixture, and qkv's engine results for it,
are computed once and shared by the families.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from qkvcli.check import engine
from qkvcli.check.cases import Case
from qkvcli.check.diagnose import first_bit_difference
from qkvcli.check.errors import Broken, CallFailed, NotSent
from qkvcli.core.arrays import Array
from qkvcli.core.results import Failure

if TYPE_CHECKING:
    from qkvcli.check.target import Implementation

FORWARD_ARGUMENTS = ("x", "w_query", "w_key", "w_value")
BACKWARD_ARGUMENTS = (*FORWARD_ARGUMENTS, "grad_query", "grad_key", "grad_value")
HEAD_BACKWARD_ARGUMENTS = (*FORWARD_ARGUMENTS, "grad_output")


def _purity_family(operation: str) -> str:
    """The family that judges whether ``operation`` changed its arguments."""
    return "head-purity" if operation.startswith("head_") else "purity"


class Session:
    """The implementation, the fixtures, the tolerance, and what the calls found so far."""

    def __init__(self, implementation: Implementation, cases: list[Case],
                 tolerance: float, on_call: Callable[[int], None] | None = None) -> None:
        self.implementation = implementation
        self.on_call = on_call  # told the number of calls so far, after each
        self.cases = cases
        self.tolerance = tolerance
        self.impurities: list[Failure] = []
        self.head_impurities: list[Failure] = []
        self.head_calls = 0
        # Fixtures whose forward agrees only to a writer's or float32's precision (the
        # forward family's diagnosis): central differences of it would measure noise.
        self.lossy: set[int] = set()
        self.calls = 0
        # The fixture and the call that broke the session (a crash, a timeout, a malformed
        # reply), and the purity families some of whose calls therefore never completed.
        self.stopped: tuple[str, Broken] | None = None
        self.unfinished: set[str] = set()
        self._forward: dict[int, tuple[Array, ...] | CallFailed] = {}
        self._backward: dict[int, tuple[Array, ...] | CallFailed] = {}
        self._reference: dict[int, tuple[tuple[Array, ...], tuple[Array, ...]]] = {}

    # --- calls with fresh copies --------------------------------------------------------

    def _checked(self, case: Case, operation: str, names: tuple[str, ...],
                 args: tuple[Array, ...], causal: bool | None = None) -> tuple[Array, ...]:
        originals = tuple(np.asarray(arg, dtype=np.float64) for arg in args)
        copies = tuple(np.array(arg, dtype=np.float64, copy=True) for arg in originals)
        self.calls += 1
        if self.on_call is not None:
            self.on_call(self.calls)
        # A head's causal flag comes after the weights, as in its Python signature.
        sent = copies if causal is None else (*copies[:4], causal, *copies[4:])
        answered = True
        try:
            return self.implementation.call(operation, sent)
        except Broken as failure:
            answered = False  # what a call that never completed changed is unknown
            self.unfinished.add(_purity_family(operation))
            if self.stopped is None and not isinstance(failure, NotSent):
                self.stopped = (case.label, failure)
            raise
        finally:
            if answered and not self.implementation.is_command:
                self._record_changes(case, operation, names, originals, copies)
                for name, where, old, new in self.implementation.take_changes():
                    self._impure(case, operation, name, where, old, new)

    def _record_changes(self, case: Case, operation: str, names: tuple[str, ...],
                        originals: tuple[Array, ...], copies: tuple[Array, ...]) -> None:
        for name, before, after in zip(names, originals, copies, strict=True):
            found = first_bit_difference(before, after)
            if found is not None:
                self._impure(case, operation, name, *found)

    def _impure(self, case: Case, operation: str, name: str, where: str, old: str,
                new: str) -> None:
        family = _purity_family(operation)
        found = self.head_impurities if family == "head-purity" else self.impurities
        found.append(Failure(family, case.label, f"{name}{where}", code="changed-argument",
                             facts=(operation, f"{name}{where}", old, new)))

    def call_forward(self, case: Case, x: Array, weights: tuple[Array, ...]) -> tuple[Array, ...]:
        """``forward(x, *weights)``. Raises a :class:`CallFailed` subclass."""
        return self._checked(case, "forward", FORWARD_ARGUMENTS, (x, *weights))

    def call_backward(self, case: Case, x: Array, weights: tuple[Array, ...],
                      upstream: tuple[Array, ...]) -> tuple[Array, ...]:
        """``backward(x, *weights, *upstream)``. Raises a :class:`CallFailed` subclass."""
        return self._checked(case, "backward", BACKWARD_ARGUMENTS, (x, *weights, *upstream))

    def call_head_forward(self, case: Case, x: Array, weights: tuple[Array, ...],
                          causal: bool) -> tuple[Array, ...]:
        """``head_forward(x, *weights, causal)``. Raises a :class:`CallFailed` subclass."""
        self.head_calls += 1
        return self._checked(case, "head_forward", FORWARD_ARGUMENTS, (x, *weights), causal)

    def call_head_backward(self, case: Case, x: Array, weights: tuple[Array, ...],
                           causal: bool, grad_output: Array) -> tuple[Array, ...]:
        """``head_backward(x, *weights, causal, grad_output)``. Raises a :class:`CallFailed`."""
        self.head_calls += 1
        return self._checked(case, "head_backward", HEAD_BACKWARD_ARGUMENTS,
                             (x, *weights, grad_output), causal)

    # --- the shared first results -------------------------------------------------------

    def forward(self, case: Case) -> tuple[Array, ...] | CallFailed:
        """The implementation's first forward on ``case`` (computed once)."""
        if id(case) not in self._forward:
            try:
                self._forward[id(case)] = self.call_forward(case, case.input, case.weights)
            except CallFailed as failure:
                self._forward[id(case)] = failure
        return self._forward[id(case)]

    def backward(self, case: Case) -> tuple[Array, ...] | CallFailed:
        """The implementation's first backward on ``case`` with its upstream (computed once)."""
        if id(case) not in self._backward:
            try:
                self._backward[id(case)] = self.call_backward(
                    case, case.input, case.weights, case.upstream)
            except CallFailed as failure:
                self._backward[id(case)] = failure
        return self._backward[id(case)]

    def reference(self, case: Case) -> tuple[tuple[Array, ...], tuple[Array, ...]]:
        """qkv's engine on ``case`` (:mod:`qkvcli.check.engine`): the expected outputs and
        gradients, computed once."""
        if id(case) not in self._reference:
            self._reference[id(case)] = (engine.forward(case.input, *case.weights),
                                         engine.backward(case.input, *case.weights,
                                                         *case.upstream))
        return self._reference[id(case)]

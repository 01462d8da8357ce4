"""One check's calls: fresh argument copies, purity records, and the results every family shares.

Every call gets its own writeable copies of the arguments; for a Python implementation
the copies are compared with the originals after the call, and any change is kept
as a finding of the kind's purity family (a ``--command`` program only ever sees
serialized copies). The first forward and backward of each fixture in each mode, and
qkv's engine on the same arguments (:mod:`qkvcli.check.engine`, called as any
implementation is), are computed once and shared by the families.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from qkvcli.check.cases import Case, Run
from qkvcli.check.engine import engine_implementation
from qkvcli.check.kinds import Kind
from qkvcli.core.arrays import Array, first_difference
from qkvcli.core.errors import QkvError
from qkvcli.core.results import Failure
from qkvcli.protocol.errors import Broken, CallFailed, NotSent, Rejected
from qkvcli.protocol.wire import OPERATIONS, SCALARS

if TYPE_CHECKING:
    from qkvcli.check.diagnose import Bundle, Precision
    from qkvcli.protocol.python import Implementation

Key = tuple[str, int, Any]  # operation, case, mode


def judges(kind: Kind, case: Case) -> bool:
    """Whether the kind's families run on ``case``, one of the check's fixtures (not the
    kind's own): a kind with fixtures of its own (RoPE's...) only on the later chapters'
    fixtures that are its cases, any other on those it takes."""
    return kind.takes(case) and (kind.fixtures is None or bool(case.kinds))


class Session:
    """The implementation, the fixtures, the tolerance, and what the calls found so far."""

    def __init__(self, implementation: Implementation, cases: list[Case],
                 tolerance: float, on_call: Callable[[int], None] | None = None,
                 isolated: bool = True, given_only: bool = False) -> None:
        self.implementation = implementation
        # Fresh copies for every call, compared after it (purity); a plan without purity
        # (chapter 26's, on qkv's engine) passes its read-only arrays as they are.
        self.isolated = isolated
        # Every kind runs on the cases given, none on its own (a chapter's plan: its fixture)
        self.given_only = given_only
        self.on_call = on_call  # told the number of calls so far, after each
        self.cases = cases
        self.tolerance = tolerance
        self.impurities: dict[str, list[Failure]] = {}  # by purity family
        self.calls = 0
        self.purity_calls: dict[str, int] = {}  # the calls each purity family judges
        # The fixture and the call that broke the session (a crash, a timeout, a malformed
        # reply), and the purity families some of whose calls therefore never completed.
        self.stopped: tuple[str, Broken] | None = None
        self.unfinished: set[str] = set()
        self.worked: set[str] = set()  # operations that answered a valid request (RoPE, MHA)
        self._first: dict[Key, Bundle | CallFailed] = {}
        self._reference: dict[Key, Bundle] = {}
        self._own: dict[str, list[Case]] = {}  # each kind's own fixtures, made once
        self._engine = engine_implementation()

    def offers(self, operation: str) -> bool:
        """Whether the implementation has ``operation`` (``backward``, ``head_backward``...)."""
        return operation in self.implementation.operations

    def cases_of(self, kind: Kind) -> list[Case]:
        """The fixtures the kind's families run on: for a kind with its own (RoPE's,
        multi-head attention's), the later chapters' fixtures given that are its cases,
        then its own; else the check's it takes (a head's include the contrast one)."""
        if kind.fixtures is not None and not self.given_only:
            if kind.forward not in self._own:
                self._own[kind.forward] = [
                    *(case for case in self.cases if judges(kind, case)), *kind.fixtures()]
            return self._own[kind.forward]
        return [case for case in self.cases if kind.takes(case)]

    def runs(self, kind: Kind) -> list[Run]:
        """Every fixture of the kind in each of its modes."""
        return [run for case in self.cases_of(kind) for run in kind.runs(case)]

    # --- calls with fresh copies --------------------------------------------------------

    def call(self, kind: Kind, run: Run, tensors: tuple[Array, ...] | None = None,
             upstream: tuple[Array, ...] | None = None) -> Bundle:
        """The kind's forward on the run (``tensors``: the input and the weights instead of
        the fixture's), or its backward given ``upstream``. Raises a :class:`CallFailed`
        subclass."""
        operation = kind.forward if upstream is None else kind.backward
        return self.invoke(kind.family("purity"), run.case.label, operation,
                           kind.call_arguments(run, tensors, upstream))

    def invoke(self, purity: str, label: str, operation: str,
               args: tuple[Any, ...]) -> Bundle:
        """``operation`` on fresh copies of ``args`` (its fields in the protocol's order;
        scalars as they are), counted and judged by the ``purity`` family, for the fixture
        ``label``. Raises a :class:`CallFailed` subclass."""
        self.calls += 1
        self.purity_calls[purity] = self.purity_calls.get(purity, 0) + 1
        if self.on_call is not None:
            self.on_call(self.calls)
        if not self.isolated:
            return self.implementation.call(operation, args)
        keys = OPERATIONS[operation][0]
        names = tuple("x" if key == "input" else key for key in keys if key not in SCALARS)
        tensors = [index for index, key in enumerate(keys) if key not in SCALARS]
        originals = tuple(np.asarray(args[index], dtype=np.float64) for index in tensors)
        copies = tuple(np.array(arg, dtype=np.float64, copy=True) for arg in originals)
        called = list(args)
        for index, copy in zip(tensors, copies, strict=True):
            called[index] = copy
        answered = True
        try:
            return self.implementation.call(operation, tuple(called))
        except Broken as failure:
            answered = False  # what a call that never completed changed is unknown
            self.unfinished.add(purity)
            if self.stopped is None and not isinstance(failure, NotSent):
                self.stopped = (label, failure)
            raise
        finally:
            if answered and not self.implementation.is_command:
                changes = [(name, *found) for name, before, after
                           in zip(names, originals, copies, strict=True)
                           if (found := first_difference(before, after)) is not None]
                for name, where, old, new in (*changes, *self.implementation.take_changes()):
                    self.impurities.setdefault(purity, []).append(Failure(
                        purity, label, f"{name}{where}", code="changed-argument",
                        facts=(operation, f"{name}{where}", old, new)))

    # --- the shared first results -------------------------------------------------------

    def first(self, kind: Kind, run: Run, backward: bool = False) -> Bundle | CallFailed:
        """The implementation's first forward (or backward, with the run's upstream
        gradients) on the run's fixture in its mode (computed once)."""
        key = (kind.backward if backward else kind.forward, id(run.case), run.mode)
        if key not in self._first:
            try:
                self._first[key] = self.call(kind, run, None,
                                             run.upstream if backward else None)
            except CallFailed as failure:
                self._first[key] = failure
        return self._first[key]

    def answered(self, kind: Kind, run: Run, backward: bool = False) -> Bundle:
        """:meth:`first`, for a plan on qkv's engine, whose fixture its reader validated:
        a refusal is raised, as the engine's own typed error where it gave one (the
        reader accepted what the engine refuses), else as the failed call."""
        found = self.first(kind, run, backward)
        if isinstance(found, CallFailed):
            raised = found.raised if isinstance(found, Rejected) else None
            raise raised if isinstance(raised, QkvError) else found
        return found

    def engine(self, kind: Kind, run: Run, tensors: tuple[Array, ...] | None = None,
               upstream: tuple[Array, ...] | None = None) -> Bundle:
        """qkv's engine on the arguments :meth:`call` takes (a valid input)."""
        operation = kind.forward if upstream is None else kind.backward
        return self._engine.call(operation, kind.call_arguments(run, tensors, upstream))

    def reference(self, kind: Kind, run: Run, backward: bool = False) -> Bundle:
        """qkv's engine on the run, what :meth:`first` is compared with (computed once)."""
        key = (kind.backward if backward else kind.forward, id(run.case), run.mode)
        if key not in self._reference:
            self._reference[key] = self.engine(kind, run, None,
                                               run.upstream if backward else None)
        return self._reference[key]

    def precision(self, kind: Kind, run: Run) -> list[tuple[str, Precision]] | None:
        """Each wrong result of the run's first forward with its precision fault, when they
        are right but for their precision (``kind.precision``; ``None`` otherwise, also
        when the call failed or every result is right)."""
        got = self.first(kind, run)
        if isinstance(got, CallFailed):
            return None
        return kind.precision(kind.forward_names, got, self.reference(kind, run),
                              self.tolerance)

    def lossy(self, kind: Kind, run: Run) -> bool:
        """Whether that forward agrees only to a lossy precision (a writer's or float32's):
        central differences of it would measure the rounding."""
        from qkvcli.check.diagnose import LOSSY

        faults = self.precision(kind, run)
        return faults is not None and all(fault.cause in LOSSY for _, fault in faults)

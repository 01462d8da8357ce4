"""The outcome of ``qkv check`` as data: one judgement per evidence family, and every failure.

A judgement is a code (``outcome``) and the facts its wording needs; the words are
:mod:`qkvcli.render.check`'s. A :class:`Failure` carries the family's own finding
(what was wrong and where, as the family diagnosed it).
"""

from __future__ import annotations

from qkvcli.core.record import Record
from qkvcli.core.results import Clause, Failure, FamilyCheck, found_at
from qkvcli.protocol.errors import Broken, CallFailed, Rejected

PROJECTION_FAMILIES: tuple[str, ...] = (
    "forward", "reverse", "shapes", "errors", "independence", "replay", "purity", "gradcheck",
)
HEAD_FAMILIES: tuple[str, ...] = (
    "head-forward", "scaling", "softmax", "mask", "head-prefix", "head-single-token",
    "head-reverse", "head-shapes", "head-errors", "head-replay", "head-purity", "head-gradcheck",
)
ROPE_FAMILIES: tuple[str, ...] = (
    "rope", "rope-reverse", "position-zero", "relative-dot", "rope-shapes", "rope-errors",
    "rope-replay", "rope-purity", "rope-gradcheck",
)
MHA_FAMILIES: tuple[str, ...] = (
    "multi-head", "multi-head-reverse", "head-isolation", "multi-head-prefix",
    "multi-head-single-token", "multi-head-shapes", "multi-head-errors", "multi-head-replay",
    "multi-head-purity", "multi-head-gradcheck",
)
CACHE_FAMILIES: tuple[str, ...] = ("cache-steps", "cache-refusals", "cache-errors",
                                   "cache-replay", "cache-purity")
FAMILIES: tuple[str, ...] = (*PROJECTION_FAMILIES, *HEAD_FAMILIES, *ROPE_FAMILIES,
                             *MHA_FAMILIES, *CACHE_FAMILIES, "protocol")
"""Every family in report order: the projections' (an implementation with ``forward``),
the head's (with ``head_forward``), RoPE's (with ``rope``), multi-head attention's (with
``mha_forward``), a KV cache's (with ``cache_steps``), then the protocol."""

NOT_RUN: tuple[str, ...] = (
    "stopped", "forward", "backward", "head_forward", "head_backward", "rope", "rope_reverse",
    "mha_forward", "mha_backward", "lossy", "head-lossy", "rope-lossy", "multi-head-lossy",
    "head-precision", "head", "shape", "head-shape", "rope-shape", "multi-head-shape",
    "no-fixture", "cache-steps", "cache_steps",
)
"""Why a family could not run on a fixture: the implementation stopped answering (the
protocol family says why), the operation named failed on the fixture (``forward``,
``backward``, ``head_forward``, ``head_backward``: the family judging that operation
says how), its forward is too imprecise for central differences (``lossy``,
``head-lossy``, ``rope-lossy``, ``multi-head-lossy``), its head's results are right but for their precision
(``head-precision``: at the tolerance they cannot show the family's claim), or its head
is wrong before the family's step (``head``; head-forward says how of these three), or
its answer has the wrong shape for the family to read (``shape``, ``head-shape``,
``rope-shape``, ``multi-head-shape``: the kind's forward family says how), or its cache
is wrong before a refusal (``cache-steps``: its plain steps already differ) or its
``cache_steps`` failed on a fixture; or no fixture
given suits the family's claim (``no-fixture``: none has the tokens it needs). A family
that skipped a fixture says so: it cannot pass on what it did not judge."""


FINDINGS: dict[str, int] = {
    "changed-argument": 4,  # operation, argument and coordinate, before, after
    "moved": 4,  # what was changed, tensor and coordinate, before, after
    "reshaped": 2,  # what was changed, tensor
    "unmoved": 2,  # what was changed, tensor
    "replay-differs": 4,  # operation, tensor and coordinate, first, second
    "replay-failed": 2,  # operation, what it said
    "probe-failed": 4,  # operation, probe (empty batch, no tokens), input shape, what it said
    "probe-shape": 5,  # probe, input shape, tensor, its shape, the shape expected
    "not-identity": 3,  # tensor and coordinate, the rotation's value, the input's
    "prefix-moved": 3,  # tensor and coordinate, before, after
    "last-unmoved": 2,  # tensor, the last position
    "one-token": 3,  # tensor and coordinate, its value, the value it must have
    "shift-moved": 4,  # the shift, dot product and coordinate, before, after
    "step-differs": 4,  # the step's position, tensor and coordinate, the step's, the pass's
    "cache-differs": 3,  # tensor and coordinate, the cache's value, the whole pass's
    "length-differs": 3,  # the step's position, the cache's length after it, the length expected
    "cache-slip": 2,  # the finding (a clause), the slip that explains it (a clause)
    "refusal-failed": 2,  # the refused step's request, what the run said
    "refusal-differs": 4,  # the refused step's request, tensor and coordinate, the run's, qkv's
    "accepted": 0,  # any number: each request silently accepted, (request code, its facts)
}
"""The finding codes and how many facts each carries."""


class CheckResult(Record):
    """Every family's check in :data:`FAMILIES` order, the failures, (``command``: a
    ``--command`` program was checked) the program's stderr, and the operations the
    implementation offered."""

    implementation: str
    fixtures: tuple[str, ...]
    checks: tuple[FamilyCheck, ...]
    failures: tuple[Failure, ...]
    stderr: str = ""
    command: bool = False
    operations: tuple[str, ...] = ()

    def failing_fixtures(self) -> tuple[str, ...]:
        """The labels of the fixtures with a finding, in order (a head's ``chapter causal``
        and the softmax probe's ``chapter x30`` are the fixture ``chapter``)."""
        found = {failure.fixture for failure in self.failures if failure.fixture is not None}
        return tuple(label for label in self.fixtures
                     if any(f == label or f.startswith(label + " ") for f in found))

    @property
    def passed(self) -> bool:
        """No family failed (one not run is no pass either, but a failure stopped it)."""
        return all(check.passed or check.outcome == "not-run" for check in self.checks)


def not_run(family: str, fixture: str | None, why: str, stopped: bool = False) -> Failure:
    """The family could not run on ``fixture``: ``why`` is one of :data:`NOT_RUN`;
    ``stopped`` (the implementation stopped) wins. Raises ``ValueError`` for another
    ``why`` (a reason the renderer has no words for)."""
    if why not in NOT_RUN:
        raise ValueError(f"not_run reason {why!r} is not one of {NOT_RUN}")
    return Failure(family, fixture, None, not_run="stopped" if stopped else why)


def call_failure(family: str, fixture: str | None, shape: str, failure: CallFailed) -> Failure:
    """A call that failed on a valid input (of ``shape``, as shown), as a finding of
    ``family``, the same for every operation: ``rejected-valid`` (operation, shape, what
    it said) when it raised or answered with an error, ``call-failed`` (what was wrong)
    when it returned something that is not its tensors; not run when the implementation
    stopped (the protocol family says why)."""
    if isinstance(failure, Broken):
        return not_run(family, fixture, "stopped")
    if isinstance(failure, Rejected):
        return found_at(family, fixture, None, Clause(
            "rejected-valid", (failure.operation, shape, failure.message)))
    return found_at(family, fixture, None, Clause("call-failed", (failure.message,)))


def not_run_after(family: str, fixture: str | None, failure: CallFailed) -> Failure:
    """``family`` could not run on ``fixture`` because a call it builds on failed: the
    failed operation is the reason (its own family says how), or the implementation
    stopped."""
    return not_run(family, fixture, failure.operation, stopped=isinstance(failure, Broken))


def not_applicable(name: str, outcome: str) -> FamilyCheck:
    """A family that does not apply: ``no-backward`` fails the check, ``command`` does not count."""
    return FamilyCheck(name, outcome == "command", outcome)

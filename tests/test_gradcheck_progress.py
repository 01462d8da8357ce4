"""The gradient check's optional ``progress(done, total)`` callback."""

from __future__ import annotations

import numpy as np
import pytest

from qkvcli.check.chapter26 import build_evidence, projections_of
from qkvcli.gradcheck.central import check_tensor
from qkvcli.gradcheck.projections import gradcheck_projections
from qkvcli.reading.load import load_fixture


def _run(samples: int | None, progress: object) -> object:
    fixture = load_fixture(None)
    layer = projections_of(fixture)
    primary = build_evidence(fixture).primary
    return gradcheck_projections(
        layer, fixture.input, fixture.upstream,
        (primary.grad_input, *primary.weight_gradients),
        fixture.step, fixture.tolerance, samples, progress=progress,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(("samples", "total"), [(None, 24), (2, 8), (1, 4)],
                         ids=["every-coordinate", "two-each", "one-each"])
def test_progress_counts_every_coordinate_across_all_tensors(
    samples: int | None, total: int
) -> None:
    calls: list[tuple[int, int]] = []
    result = _run(samples, lambda done, count: calls.append((done, count)))
    assert calls == [(done, total) for done in range(1, total + 1)]
    assert result.count == total  # type: ignore[attr-defined]


def test_progress_does_not_change_the_result() -> None:
    assert _run(None, None) == _run(None, lambda done, count: None)


def test_check_tensor_reports_its_own_count() -> None:
    calls: list[tuple[int, int]] = []
    values = np.arange(5.0)
    check_tensor("input", values, 2 * values, 1e-6, 2e-6, 3,
                 lambda probe: float(np.sum(probe * probe)),
                 progress=lambda done, count: calls.append((done, count)))
    assert calls == [(1, 3), (2, 3), (3, 3)]

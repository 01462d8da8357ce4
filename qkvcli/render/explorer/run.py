"""The explorer page of ``qkv run`` and ``qkv report``: the chapter's three projections.

The input, then the three branches side by side (query solid, key dashed, value double:
each its weight, its output, its upstream gradient and its weight's gradient), then
``dX`` where the three paths meet, then the gradient check. A projection value opens its
row-times-column terms, a ``dX`` value its three path terms, a ``dW`` value its sum over
batch and tokens, a gradient-check coordinate its analytic and numerical values.
"""

from __future__ import annotations

from qkvcli.check.chapter26_evidence import Evidence
from qkvcli.core.arrays import Array
from qkvcli.render.explorer.checks import checks_section
from qkvcli.render.explorer.document import gradcheck_section
from qkvcli.render.explorer.page import Page
from qkvcli.render.report import PUBLISHED_TENSORS
from qkvcli.render.wording import check_rows, verdict
from qkvcli.stages.terms import (
    Derivation,
    input_paths,
    projection,
    weight_gradient,
)

LETTERS = {"query": "Q", "key": "K", "value": "V"}


def run_page(evidence: Evidence, precision: int, title: str) -> str:
    """The chapter evidence's explorer page (one self-contained HTML document)."""
    p = evidence.primary
    c = evidence.config
    page = Page(title, precision)
    page.select("batch", "batch item", c.batch)
    rows = check_rows(evidence)
    page.sections.append(checks_section(rows))
    arrays = {PUBLISHED_TENSORS[field]: value for field, value in p.tensors().items()}

    page.sections.append(
        '<section class="group"><h2>Input</h2>'
        + page.tensor("input", arrays["input"], None,
                      f"X [batch, tokens, d_model] = [{c.batch}, {c.tokens}, {c.d_model}], "
                      "given by the fixture", given=True)
        + "</section>")
    branches = []
    for index, branch in enumerate(("query", "key", "value")):
        letter = LETTERS[branch]
        weight, output = p.weights[index], p.outputs[index]
        upstream = (p.grad_query, p.grad_key, p.grad_value)[index]

        def project(at: tuple[int, ...], w: Array = weight, y: Array = output,
                    n: str = letter) -> Derivation:
            return projection(p.input, w, None, at, float(y[at]), ("X", f"W_{n}", f"b_{n}"))

        def gradient(at: tuple[int, ...], u: Array = upstream,
                     g: Array = p.weight_gradients[index], n: str = letter) -> Derivation:
            return weight_gradient(p.input, u, (at[0], at[1]), float(g[at]), f"U_{n}")

        branches.append(
            f'<div class="branch branch-{branch}"><h2>{branch} branch</h2>'
            + page.tensor(f"{branch}_weight", weight, None, f"W_{letter}, given",
                          given=True)
            + page.tensor(branch, output, project, f"{letter} = X W_{letter}")
            + page.tensor(f"upstream_{branch}", upstream, None,
                          f"U_{letter} = dL/d{letter}, given by the fixture", given=True)
            + page.tensor(f"{branch}_weight_gradient", p.weight_gradients[index], gradient,
                          f"dW_{letter} = Xᵀ U_{letter}: this branch only")
            + "</div>")
    page.sections.append('<section class="group branches"><h2 class="sr">The three '
                         'branches</h2>' + "".join(branches) + "</section>")

    def paths(at: tuple[int, ...]) -> Derivation:
        return input_paths((p.grad_query, p.grad_key, p.grad_value), p.weights, at,
                           float(p.grad_input[at]))

    page.sections.append(
        '<section class="group"><h2>Where the paths meet</h2>'
        + page.tensor("input_gradient", p.grad_input, paths,
                      "dX = U_Q W_Qᵀ + U_K W_Kᵀ + U_V W_Vᵀ: the three paths add")
        + "</section>")
    page.sections.append(gradcheck_section(page, evidence.gradcheck, lambda name: name))
    passed = sum(row.passed for row in rows)
    heading = f"{title}: {evidence.chapter}"
    return page.html(heading, verdict(evidence.passed, passed, len(rows)), evidence.passed)

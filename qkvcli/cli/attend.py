"""``qkv attend``: one attention head or a multi-head layer, every check, shown."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from qkvcli.cli.group import EXIT_FAILED
from qkvcli.cli.io import check_outputs, label_of, working_on, write_file
from qkvcli.cli.options import (
    ATTEND_PRECISION,
    CheckOverrides,
    ViewSettings,
    fixture_argument,
    format_option,
    gradcheck_mode_options,
    gradcheck_options,
    html_option,
    max_elements_option,
    output_option,
    resolve_format,
    tensor_policy,
    tensors_option,
    view_options,
)
from qkvcli.cli.show import show
from qkvcli.render import render_pieces

if TYPE_CHECKING:
    from pathlib import Path


def attend_label(path: Path | None, example: str) -> str:
    """How messages name attend's fixture: its path, ``<stdin>`` or the bundled example."""
    from qkvcli.reading.attend import EXAMPLES

    return label_of(path, bundled=f"<bundled {EXAMPLES[example]}>")


def _families(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--families``: noted here, answered once every option is read (its format and
    output); no fixture is read."""
    if value and not ctx.resilient_parsing:
        ctx.meta["families"] = True


def _show_families(fmt: str, output: Path | None) -> None:
    """The table of model families: the text listing, or with ``--format json`` one JSON
    document (report ``families``); to standard output or ``-o``."""
    from qkvcli.authoring.family_table import families_facts, families_text

    if fmt == "json":
        from qkvcli.render.document import dumps, head

        text = dumps(head("families", **families_facts()))
    else:
        text = families_text()
    if output is None:
        click.echo(text, nl=False)
    else:
        write_file(output, text)


@click.command()
@fixture_argument
@click.option("--families", is_flag=True, expose_value=False, is_eager=True,
              callback=_families, help="List the model families qkv reads from a checkpoint, "
              "each with its attention's pieces, and those it refuses, each with what it "
              "lacks (--format json: as one JSON document); read no fixture.")
@click.option("--example", type=click.Choice(("chapter", "primer")), default=None,
              help="Run a bundled fixture: the chapter's, or the primer's worked example.")
@click.option("--causal", is_flag=True, help="Mask key positions after each query (-inf above "
              'the diagonal before the softmax); the fixture\'s "causal" does it too.')
@click.option("--decode", is_flag=True, help="Also decode the layer one token at a time "
              "with a KV cache of its K/V heads (a ring of its sliding window, if it has "
              "one) and compare each step with the same row of the full causal pass "
              "(tolerance 1e-12): the cached-steps check, with each step's worst difference "
              "and the cache's shape and bytes. Needs the causal mask.")
@click.option("--heads", type=click.IntRange(min=1), default=None,
              help="Split the projections into this many heads (a fixture that gives "
              '"heads" must agree); each head attends on its own slice.')
@click.option("--trust-paths", is_flag=True, help="Let FIXTURE read files outside its "
              "directory (absolute paths, .., links out: a hub cache's model.safetensors).")
@format_option()
@output_option
@tensors_option
@gradcheck_mode_options
@gradcheck_options
@max_elements_option
@view_options
@html_option
@click.option("--shading", type=click.Choice(("absolute", "row")), default="absolute",
              show_default=True, help="Rich heat maps: shade each weight against 1, or "
              "against the largest weight of its query row.")
def attend(
    fixture: Path | None, example: str | None, causal: bool, decode: bool, heads: int | None,
    trust_paths: bool, fmt: str, output: Path | None, tensors: str | None, max_elements: int,
    view: ViewSettings,
    overrides: CheckOverrides,
    html: Path | None = None,
    shading: str = "absolute",
) -> None:
    """One attention head on FIXTURE: O = softmax(Q K^T / sqrt(d_k)) V.

    Shows scores, scaled scores, softmax weights (each row sums to 1), the output
    (each row inside the convex hull of the value rows), the reverse pass back to X and
    every weight and bias, and a central-difference check of the whole head. FIXTURE
    defaults to the chapter fixture; --example primer runs the primer's worked example.
    Fixtures may use torch [out,in] or packed in_proj_weight layouts, biases, and
    "value_width": "independent". With --heads H (or "heads" in the fixture), an
    out_proj/c_proj output projection or GPT-2's c_attn, it runs a multi-head layer.
    The gradient check takes run's modes; --mode auto also samples a tensor whose
    full check would cost more than 8192 units (one unit: 65,536 multiply-adds, what
    --max-evaluations counts), and a large model recomputes only what each perturbed
    coordinate reaches (the text's gradcheck= lines say what). Tensors over 4096
    elements are summarised with a sha256 digest unless --tensors full.
    Exit status: 0 all checks passed, 1 a check failed, 2 bad input.
    """
    import contextlib

    from qkvcli.attention.decode import TOLERANCE
    from qkvcli.attention.fixture import load_layer
    from qkvcli.check.attend import build_attend_evidence
    from qkvcli.cli.console import gradcheck_progress
    from qkvcli.gradcheck.settings import DEFAULT_DIRECTIONS, DEFAULT_MODE, MAX_EVALUATIONS

    if click.get_current_context().meta.get("families"):
        check_outputs([output], [fixture])
        _show_families(fmt, output)
        return
    if fixture is not None and example is not None:
        raise click.UsageError("give FIXTURE or --example, not both")
    view = view._replace(shading=shading)
    check_outputs([output, *(path for _, path in view.exports), html], [fixture])
    from qkvcli.reading.files import trusting_paths

    label = attend_label(fixture, example or "chapter")
    changes = overrides.changes()
    mode = changes.pop("mode", DEFAULT_MODE)
    directions = changes.pop("directions", DEFAULT_DIRECTIONS)
    with trusting_paths(trust_paths), working_on(label):
        loaded, layer = load_layer(fixture, example or "chapter", max_elements, heads, causal,
                                   changes)
    causal = loaded.function.causal  # the fixture's "causal", or --causal
    overrides.warn_ignored(mode)
    reporter = gradcheck_progress(resolve_format(fmt, output), view)
    settings = {"mode": mode, "directions": directions, "progress": reporter,
                "limit": overrides.max_evaluations or MAX_EVALUATIONS}
    within = None  # the page's causal toggle: the weights under the other mask, if small
    if html is not None:
        from qkvcli.render.explorer.page import PAGE_CELLS, TOGGLE_UP_TO

        within = (TOGGLE_UP_TO, PAGE_CELLS)
    with working_on(label), (reporter or contextlib.nullcontext()):
        # the check's budget (counted in what its evaluations cost) is refused before any work
        evidence = build_attend_evidence(loaded, causal=causal, other_mask_within=within,
                                         layer=layer, decode=TOLERANCE if decode else None,
                                         **settings)
    policy = tensor_policy(tensors, view.full)
    show(evidence, fmt, view, output, title="qkv attend", precision=ATTEND_PRECISION,
         pieces=lambda shown: render_pieces(evidence, shown, precision=view.precision,
                                            tensors=policy), html=html)
    if not evidence.passed:
        from qkvcli.render.attend import failed_checks

        click.echo(f"qkv: FAILED: {', '.join(failed_checks(evidence))}", err=True)
        raise SystemExit(EXIT_FAILED)

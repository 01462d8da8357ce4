"""``qkv inspect FILE.safetensors``, and the checkpoint half of ``qkv init --from-safetensors``."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from qkvcli.cli.group import InputError
from qkvcli.cli.paths import SafePath

if TYPE_CHECKING:
    from pathlib import Path

    from qkvcli.authoring.checkpoint import Entry


def read_entries(path: Path) -> list[Entry]:
    """Every tensor's ``(name, dtype, shape)`` from the checkpoint's header. Raises InputError."""
    from qkvcli.fixtures.files import InputFileError
    from qkvcli.fixtures.problems import FixtureError
    from qkvcli.fixtures.safetensors import list_tensors

    try:
        return list_tensors(path)
    except InputFileError as error:
        raise InputError(str(error)) from None
    except FixtureError as error:
        raise InputError(error.message) from None


NAME_LIMIT = 200
"""Characters of a tensor name ``qkv inspect`` shows; a longer one ends in ``…``."""


def inspect_lines(entries: list[Entry]) -> list[str]:
    """One aligned line per tensor: name, dtype, shape and, if recognised, its role."""
    from qkvcli.authoring.checkpoint import role_of
    from qkvcli.core.text import printable

    shapes = ["[" + ",".join(map(str, shape)) + "]" for _, _, shape in entries]
    # Names come from the file: escaped, and capped so one cannot widen every line.
    names = [printable(name, NAME_LIMIT) for name, _, _ in entries]
    name_width = max((len(name) for name in names), default=0)
    dtype_width = max((len(dtype) for _, dtype, _ in entries), default=0)
    shape_width = max((len(shape) for shape in shapes), default=0)
    lines = []
    for (raw, dtype, _), shape, name in zip(entries, shapes, names, strict=True):
        role = role_of(raw)
        line = f"{name:<{name_width}}  {dtype:<{dtype_width}}  {shape:<{shape_width}}"
        lines.append((f"{line}  * {role}" if role else line).rstrip())
    recognised = sum(1 for name, _, _ in entries if role_of(name))
    noun = "tensor" if len(entries) == 1 else "tensors"
    lines.append(f"# {len(entries)} {noun}, {recognised} recognised attention projections (*)")
    return lines


@click.command()
@click.argument("checkpoint", type=SafePath(dir_okay=False))
def inspect(checkpoint: Path) -> None:
    """List every tensor of CHECKPOINT (.safetensors): name, dtype, shape.

    Marks with * the attention projections qkv recognises: GPT-2 attn.c_attn and
    attn.c_proj, Hugging Face q_proj/k_proj/v_proj/o_proj or query/key/value. Only the
    header is read. Needs the checkpoints extra (pip install 'qkv[checkpoints]').
    """
    click.echo("\n".join(inspect_lines(read_entries(checkpoint))))


def checkpoint_fixture_text(
    checkpoint: Path, prefix: str, heads: int, tokens: int, seed: int, output: Path | None,
    max_elements: int | None = None,
) -> str:
    """The text of an attend fixture referencing ``checkpoint``'s tensors under ``prefix``.

    The checkpoint's path is written relative to FILE's directory (the current directory
    without -o), which it must lie inside, by the rule attend reads it with (no ``..``,
    no symbolic link leading out): fixtures only read what ships beside them. ``heads``
    must divide the projections' widths, and the input, projections and ``[1,H,T,T]``
    scores must fit ``max_elements`` (default: attend's); above attend's default, a
    warning names the ``--max-elements`` attend needs.
    """
    from qkvcli.attention.layer_fixture import MAX_HEADS
    from qkvcli.authoring.checkpoint import CheckpointError, checkpoint_document
    from qkvcli.authoring.starter import dump_fixture
    from qkvcli.cli.init_checks import warn_run_limit
    from qkvcli.core.text import printable
    from qkvcli.fixtures.files import confined
    from qkvcli.fixtures.limits import DEFAULT_MAX_ELEMENTS
    from qkvcli.fixtures.problems import FixtureError

    if printable(prefix, None) != prefix:
        raise InputError(f"--prefix {printable(prefix)}: control characters are refused")
    entries = read_entries(checkpoint)
    base = os.path.abspath(os.path.dirname(os.fspath(output)) if output is not None else ".")
    relative = os.path.relpath(os.path.abspath(os.fspath(checkpoint)), base)
    try:
        confined(base, relative, "--from-safetensors")
    except FixtureError as error:
        raise InputError(f"--from-safetensors: {error.message}: a fixture may only read files "
                         f"beside it (in {printable(base)})") from None
    try:
        document, (d_model, width, value_width) = checkpoint_document(
            entries, relative.replace(os.sep, "/"), prefix, heads, tokens, seed)
    except CheckpointError as error:
        raise InputError(f"{printable(str(checkpoint))}: {error}") from None
    if heads > MAX_HEADS or width % heads or value_width % heads:
        raise InputError(f"--heads {heads}: must be at most {MAX_HEADS} and divide the "
                         f"query/key width {width} and the value width {value_width} of "
                         f"{printable(prefix) or 'the layer'}")
    sizes = {"input [1,T,d_model]": tokens * d_model,
             "projections [1,T,width]": tokens * max(width, value_width),
             "attention scores [1,H,T,T]": heads * tokens * tokens}
    limit = DEFAULT_MAX_ELEMENTS if max_elements is None else max_elements
    for label, count in sizes.items():
        if count > limit:
            raise InputError(f"--tokens {tokens} --heads {heads}: the {label} would have "
                             f"{count} elements, more than the limit {limit} (lower --tokens, "
                             "or raise --max-elements)")
    warn_run_limit(sizes)
    return dump_fixture(document)

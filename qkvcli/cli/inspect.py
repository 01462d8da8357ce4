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


def inspect_lines(entries: list[Entry]) -> list[str]:
    """One aligned line per tensor: name, dtype, shape and, if recognised, its role."""
    from qkvcli.authoring.checkpoint import role_of

    shapes = ["[" + ",".join(map(str, shape)) + "]" for _, _, shape in entries]
    name_width = max((len(name) for name, _, _ in entries), default=0)
    dtype_width = max((len(dtype) for _, dtype, _ in entries), default=0)
    shape_width = max((len(shape) for shape in shapes), default=0)
    lines = []
    for (name, dtype, _), shape in zip(entries, shapes, strict=True):
        role = role_of(name)
        line = f"{name:<{name_width}}  {dtype:<{dtype_width}}  {shape:<{shape_width}}"
        lines.append((f"{line}  * {role}" if role else line).rstrip())
    recognised = sum(1 for name, _, _ in entries if role_of(name))
    lines.append(f"# {len(entries)} tensors, {recognised} recognised attention projections (*)")
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
    checkpoint: Path, prefix: str, heads: int, tokens: int, seed: int, output: Path | None
) -> str:
    """The text of an attend fixture referencing ``checkpoint``'s tensors under ``prefix``.

    The checkpoint's path is written relative to FILE's directory (the current directory
    without -o), which it must lie inside: fixtures only read what ships beside them.
    """
    from qkvcli.authoring.checkpoint import CheckpointError, checkpoint_document
    from qkvcli.authoring.starter import dump_fixture

    entries = read_entries(checkpoint)
    base = os.path.abspath(os.path.dirname(os.fspath(output)) if output is not None else ".")
    relative = os.path.relpath(os.path.abspath(os.fspath(checkpoint)), base)
    if relative.startswith("..") or os.path.isabs(relative):
        raise InputError(f"{checkpoint}: the checkpoint must lie inside the fixture's directory "
                         f"({base}); a fixture may only read files beside it")
    try:
        document = checkpoint_document(entries, relative.replace(os.sep, "/"), prefix, heads,
                                       tokens, seed)
    except CheckpointError as error:
        raise InputError(f"{checkpoint}: {error}") from None
    return dump_fixture(document)

"""``qkv inspect FILE.safetensors``, and the checkpoint half of ``qkv init --from-safetensors``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from qkvcli.cli.group import InputError
from qkvcli.cli.io import SafePath

if TYPE_CHECKING:
    from pathlib import Path

    from qkvcli.authoring.checkpoint import Entry


def read_entries(path: Path) -> list[Entry]:
    """Every tensor's ``(name, dtype, shape)`` from the checkpoint's header. Raises InputError."""
    from qkvcli.reading.files import InputFileError
    from qkvcli.reading.problems import FixtureError
    from qkvcli.reading.safetensors import list_tensors

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

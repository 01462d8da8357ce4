"""``qkv inspect FILE.safetensors``, and the checkpoint half of ``qkv init --from-safetensors``.

A checkpoint is one ``.safetensors`` file or a sharded checkpoint's
``model.safetensors.index.json``, whose ``weight_map`` names the shard (beside the index)
that holds each tensor. Paths typed on the command line are the user's own choice: they
and the shards beside an index may be symbolic links anywhere (a hub cache's snapshot).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import click

from qkvcli.cli.group import InputError
from qkvcli.cli.io import CheckpointPath

if TYPE_CHECKING:
    from pathlib import Path

    from qkvcli.authoring.tensor_names import Entry

INDEX_SUFFIX = ".index.json"
MAX_INDEX_BYTES = 64 << 20  # a weight_map of a million tensors is ~100 bytes each


def read_entries(path: Path) -> list[Entry]:
    """Every tensor's ``(name, dtype, shape)`` from the checkpoint's header(s). Raises InputError."""
    return read_checkpoint(path)[0]


def _index(path: Path) -> dict[str, str]:
    """The ``weight_map`` of a sharded checkpoint's index: tensor name -> shard file name."""
    from qkvcli.core.text import printable
    from qkvcli.reading.files import InputFileError, read_limited, relative_path
    from qkvcli.reading.json_values import parse_json_bytes
    from qkvcli.reading.problems import FixtureError

    shown = printable(str(path))
    try:
        # Strict: a tensor given twice has no one shard (json would keep the last).
        data: Any = parse_json_bytes(read_limited(path, MAX_INDEX_BYTES, "checkpoint index"))
    except InputFileError as error:
        raise InputError(str(error)) from None
    except FixtureError as error:
        raise InputError(f"{shown}: not a checkpoint index ({error})") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
        raise InputError(f"{shown}: not a checkpoint index (no weight_map of tensor names to "
                         "shard files)")
    for shard in sorted(set(weight_map.values())):
        if os.path.isabs(shard):
            raise InputError(f"{shown}: shard {printable(shard)} is an absolute path; an index "
                             "names its shards beside it")
        try:  # the shards lie beside the index (they may be links, as in a hub cache)
            relative_path(shard, "weight_map")
        except FixtureError as error:
            raise InputError(f"{shown}: shard {error.message}") from None
        beside = os.path.join(os.path.dirname(os.fspath(path)), shard)
        if os.path.exists(beside) and os.path.samefile(beside, path):
            raise InputError(f"{shown}: shard {printable(shard)} is the index itself")
    return weight_map


def read_checkpoint(path: Path) -> tuple[list[Entry], dict[str, str]]:
    """Every tensor, sorted by name, and the file holding each (as a path beside ``path``'s
    directory, or ``path`` itself). Raises InputError."""
    from qkvcli.core.text import printable
    from qkvcli.reading.files import InputFileError
    from qkvcli.reading.problems import FixtureError
    from qkvcli.reading.safetensors import list_tensors

    def listed(file: str) -> list[Entry]:
        try:
            return list_tensors(file)
        except InputFileError as error:
            raise InputError(str(error)) from None
        except FixtureError as error:
            raise InputError(error.message) from None

    name = os.fspath(path)
    if not name.endswith(INDEX_SUFFIX):
        entries = listed(name)
        return entries, dict.fromkeys((entry[0] for entry in entries), name)
    weight_map = _index(path)
    base = os.path.dirname(name)
    entries, where = [], {}
    for shard in sorted(set(weight_map.values())):
        file = os.path.join(base, shard)
        for entry in listed(file):
            if weight_map.get(entry[0]) == shard:  # the index says which shard holds it
                entries.append(entry)
                where[entry[0]] = file
    missing = sorted(set(weight_map) - set(where))
    if missing:
        raise InputError(f"{printable(name)}: tensor {printable(missing[0])} is not in its shard "
                         f"{printable(weight_map[missing[0]])}")
    return sorted(entries), where


NAME_LIMIT = 200
"""Characters of a tensor name ``qkv inspect`` shows; a longer one ends in ``…``."""


def inspect_lines(entries: list[Entry]) -> list[str]:
    """One aligned line per tensor (name, dtype, shape and, if recognised, its role), grouped
    by layer in natural order, then the layer prefixes ``--prefix`` takes."""
    from qkvcli.authoring.tensor_names import cross_attention, layer_prefixes, natural_key, role_of
    from qkvcli.core.text import printable

    entries = sorted(entries, key=lambda entry: natural_key(entry[0]))
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
    every = {name for name, _, _ in entries}
    # a cross-attention layer is listed tensor by tensor, but offered as no --prefix:
    # init computes self-attention only
    layers = [(prefix, naming) for prefix, naming in layer_prefixes(sorted(every))
              if not cross_attention(prefix, naming, every)]
    if layers:
        shown = " ".join(printable(prefix, NAME_LIMIT) for prefix, _ in layers)
        noun = "layer" if len(layers) == 1 else "layers"
        lines.append(f"# {len(layers)} attention {noun}, by --prefix: {shown}")
    return lines


@click.command()
@click.argument("checkpoint", type=CheckpointPath())
def inspect(checkpoint: Path) -> None:
    """List every tensor of CHECKPOINT (.safetensors, or a sharded model.safetensors.index.json).

    Name, dtype, shape, grouped by layer; marks with * the attention projections qkv
    recognises (GPT-2 c_attn/c_proj; q_proj/k_proj/v_proj with o_proj, out_proj or Phi's
    dense; BERT query/key/value and attention.output.dense; DistilBERT q_lin...out_lin;
    GPT-NeoX, BLOOM, Falcon and Persimmon query_key_value and dense; Phi-3's and CodeGen's
    qkv_proj; MPT's Wqkv; Qwen3's, OLMo 2's, Gemma 3's and Cohere's q_norm and k_norm;
    Phi's, Persimmon's and StableLM's q_layernorm and k_layernorm)
    and lists the layer prefixes that init --prefix takes. Only the headers are read.
    """
    click.echo("\n".join(inspect_lines(read_entries(checkpoint))))

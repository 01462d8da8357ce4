"""``qkv init`` and ``qkv schema``.

What ``qkv init`` must not write: a fixture that its own ``run`` or ``attend`` would refuse.

Policy for ``--max-elements`` above run's default (``DEFAULT_MAX_ELEMENTS``): init
writes the fixture, since the larger limit was asked for, and warns on stderr naming the
``--max-elements`` value ``run`` and ``attend`` will need. A fixture over the reader's
byte limit (``MAX_FILE_BYTES``) cannot be read with any option, so init refuses it and
points to ``--generate`` and ``--npy``. Paths init writes follow the reading rule
(:func:`~qkvcli.reading.files.relative_path`): relative, no ``..``, no NUL.

``qkv init`` and ``qkv schema``: writing starter fixtures and publishing the format.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from qkvcli.cli.group import InputError
from qkvcli.cli.io import CheckpointPath, OutputPath, SafePath, check_outputs, refuse_same_file, write_file
from qkvcli.core.splitmix import MASK64

MIN_BYTES_PER_VALUE = 4
"""No written value takes fewer bytes than this (``0.0,``): a sure lower bound of the text."""
LARGE_HINT = "write large fixtures with --generate or --npy DIR"


def warn_run_limit(counts: dict[str, int]) -> None:
    """Warn when the largest of ``counts`` (tensors and the projections, by label) is over
    the default ``--max-elements`` of ``run`` and ``attend``, naming the value they need."""
    from qkvcli.reading.limits import DEFAULT_MAX_ELEMENTS

    label, count = max(counts.items(), key=lambda item: item[1])
    if count > DEFAULT_MAX_ELEMENTS:
        click.echo(f"qkv: warning: the {label} has {count} elements, over the default limit "
                   f"{DEFAULT_MAX_ELEMENTS}; run the fixture with --max-elements {count}", err=True)


def check_values_fit(values: int) -> None:
    """Refuse up front a written-out fixture of ``values`` numbers that is surely over the
    reader's byte limit (before the text is built)."""
    from qkvcli.reading import limits

    if values * MIN_BYTES_PER_VALUE > limits.MAX_FILE_BYTES:
        raise InputError(f"{values} values written out would be more than {limits.MAX_FILE_BYTES} "
                         f"bytes, the limit of a fixture file; {LARGE_HINT}")


def check_text_fits(text: str) -> None:
    """Refuse fixture ``text`` over the reader's byte limit (no option raises that limit)."""
    from qkvcli.reading import limits

    size = len(text.encode("utf-8"))
    if size > limits.MAX_FILE_BYTES:
        raise InputError(f"the fixture would be {size} bytes, more than {limits.MAX_FILE_BYTES}, "
                         f"the limit of a fixture file; {LARGE_HINT}")


def npy_directory(raw: str) -> str:
    """``--npy DIR`` as the relative POSIX path the fixture will name: absolute paths, ``..``
    and NUL refused, as when reading. Raises :class:`InputError`."""
    from qkvcli.reading.files import relative_path
    from qkvcli.reading.problems import FixtureError

    try:
        relative = relative_path(raw, "--npy")
    except FixtureError as error:
        raise InputError(str(error)) from None
    shown = relative.as_posix()
    return "" if shown == "." else shown


# A starter fixture is JSON text of about 25 bytes a value; this keeps the largest one
# comfortably under the reader's file-size limit.
INIT_MAX_ELEMENTS = 1 << 20
# --generate and --npy write a few bytes per tensor: the reader's own limit applies.
LARGE_MAX_ELEMENTS = 1 << 27

if TYPE_CHECKING:
    from pathlib import Path

    from qkvcli.authoring.checkpoint import ModelFunction


@click.command()
@click.option("--seed", type=click.IntRange(0, MASK64), default=None,
              help="SplitMix64 seed of the weights (and of the input and upstream).  [default: 26]")
@click.option("--batch", type=click.IntRange(min=0), default=None,
              help="Sequences in the input X (0: an empty batch axis).  [default: 1]")
@click.option("--tokens", type=click.IntRange(min=0), default=None,
              help="Positions per sequence (0: an empty token axis).  [default: 2]")
@click.option("--d-model", type=click.IntRange(min=1), default=None,
              help="Width of each input vector: rows of W_Q, W_K, W_V.  [default: 3]")
@click.option("--d-head", type=click.IntRange(min=1), default=None,
              help="Width of each projection: columns of W_Q, W_K, W_V.  [default: 2]")
@click.option("--from-chapter", is_flag=True,
              help="Write the chapter's own fixture instead of a seeded one.")
@click.option("-o", "--output", type=OutputPath(), default=None,
              help="Write to FILE (atomically) instead of standard output.")
@click.option("--force", is_flag=True, help="Overwrite FILE (and .npy files) if they exist.")
@click.option("--generate", is_flag=True,
              help="Write seeded `generate` specs instead of values: a few lines at any size.")
@click.option("--npy", "npy_dir", default=None, metavar="DIR",
              help="Write the tensors as .npy files in DIR (relative to FILE's directory).")
@click.option("--max-elements", type=click.IntRange(min=1), default=None,
              help=f"Refuse to write a tensor larger than this many elements.  [default: "
              f"{INIT_MAX_ELEMENTS} written out, {LARGE_MAX_ELEMENTS} with --generate/--npy]")
@click.option("--from-safetensors", "checkpoint", type=CheckpointPath(), default=None,
              metavar="CHECKPOINT",
              help="Write an attend fixture referencing CHECKPOINT's attention projections "
              "under --prefix (with --heads, --tokens, --seed).")
@click.option("--prefix", default="", help="Tensor-name prefix of the layer, e.g. "
              "transformer.h.0.attn. (qkv inspect lists them).")
@click.option("--heads", type=click.IntRange(min=1), default=None,
              help="Heads of the layer (with --from-safetensors): needed without a config, "
              "must agree with one.")
@click.option("--causal/--no-causal", default=None,
              help="Whether the layer masks later positions (with --from-safetensors): needed "
              "without a config, must agree with one.")
@click.option("--config", "config", type=SafePath(dir_okay=False), default=None, metavar="FILE",
              help="The model's Hugging Face config.json.  [default: config.json beside "
              "CHECKPOINT, if there]")
@click.option("--no-rope", "no_rope", is_flag=True,
              help="The layer turns Q and K by no RoPE (with --from-safetensors and no config: "
              "needed for q_proj/k_proj/v_proj/out_proj layers).")
@click.option("--scale", "scale", default=None, metavar="FACTOR",
              help="The scores' factor, a positive number or inverse-sqrt (1/sqrt(d_k)) (with "
              "--from-safetensors and no config: needed for q_proj/k_proj/v_proj/out_proj "
              "layers).")
def init(
    seed: int | None, batch: int | None, tokens: int | None, d_model: int | None,
    d_head: int | None, from_chapter: bool, output: Path | None, force: bool,
    generate: bool, npy_dir: str | None, max_elements: int | None, checkpoint: Path | None,
    prefix: str, heads: int | None, causal: bool | None, config: Path | None,
    no_rope: bool, scale: str | None,
) -> None:
    """Write a starter fixture with seeded weights, input and upstream gradients.

    The weights are the reference's initialization for --seed (a fresh SplitMix64 at
    that state; query, key, value; Xavier-uniform, row-major), written so they load back
    bit for bit. The input and upstream come from generators of their own. Never
    overwrites FILE unless --force. --generate and --npy DIR keep large fixtures small:
    the same weights (bit for bit), with the input and upstream drawn uniform in [-1, 1).
    --from-safetensors CHECKPOINT --prefix transformer.h.0.attn. writes a `qkv attend`
    fixture that references the checkpoint's tensors (CHECKPOINT may be a sharded
    model.safetensors.index.json), with a seeded input of --tokens (default 4)
    positions. The layer's function (heads, K/V heads, causal, RoPE, scale) comes from
    the model's config.json beside CHECKPOINT (or --config); without one, --heads and
    --causal/--no-causal must say it. What the config asks for that qkv does not
    compute is refused, naming the key.
    """
    large = generate or npy_dir is not None
    given_max = max_elements
    if max_elements is None:
        max_elements = LARGE_MAX_ELEMENTS if large else INIT_MAX_ELEMENTS
    if npy_dir is not None and output is None:
        raise click.UsageError("--npy needs -o FILE: the .npy files are written beside it")
    check_outputs([output], [checkpoint])
    if checkpoint is not None:
        from qkvcli.reading.limits import DEFAULT_SEED

        text = checkpoint_fixture_text(checkpoint, prefix, heads, 4 if tokens is None
                                       else tokens, DEFAULT_SEED if seed is None else seed, output,
                                       given_max, causal, config, False if no_rope else None,
                                       _scale_option(scale))
    elif heads is not None or causal is not None or config is not None or no_rope or (
            scale is not None):
        raise click.UsageError("--heads, --causal/--no-causal, --config, --no-rope and --scale "
                               "go with --from-safetensors")
    elif from_chapter:
        given = [name for name, value in (("--seed", seed), ("--batch", batch),
                 ("--tokens", tokens), ("--d-model", d_model), ("--d-head", d_head),
                 ("--generate", generate or None), ("--npy", npy_dir))
                 if value is not None]
        if given:
            raise click.UsageError(f"--from-chapter writes the chapter's fixture; drop {given[0]}")
        from qkvcli.reading.load import bundled_fixture_text

        text = bundled_fixture_text()
    else:
        from qkvcli.authoring.starter import dump_fixture, starter_fixture
        from qkvcli.reading.limits import DEFAULT_SEED

        seed = DEFAULT_SEED if seed is None else seed
        batch, tokens = (1 if batch is None else batch), (2 if tokens is None else tokens)
        d_model, d_head = (3 if d_model is None else d_model), (2 if d_head is None else d_head)
        # The upstream has the projections' shape [B,T,d_head]: the run's own derived limit.
        for label, count in (("input", batch * tokens * d_model), ("weight", d_model * d_head),
                             ("upstream", batch * tokens * d_head)):
            if count > max_elements:
                raise InputError(f"the {label} would have {count} elements, more than the "
                                 f"limit {max_elements} (raise it with --max-elements)")
        counts = {"input": batch * tokens * d_model, "weight": d_model * d_head,
                  "upstream": batch * tokens * d_head}
        if large:
            text = _large_fixture(seed, batch, tokens, d_model, d_head, output, npy_dir, force)
        else:
            check_values_fit(counts["input"] + 3 * (counts["weight"] + counts["upstream"]))
            text = dump_fixture(starter_fixture(seed, batch, tokens, d_model, d_head))
            check_text_fits(text)
        warn_run_limit(counts)
    if output is None:
        click.echo(text, nl=False)
        return
    # Never over an existing file without --force (hard-linked into place: atomic).
    write_file(output, text, new_only=not force)


def _scale_option(raw: str | None) -> float | None:
    """``--scale``: ``inverse-sqrt`` is 0.0 (the default factor, said explicitly), else a
    finite positive number; ``None`` when not given. Raises :class:`click.BadParameter`."""
    import math

    if raw is None:
        return None
    if raw == "inverse-sqrt":
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (0.0 < value < math.inf):
        raise click.BadParameter("expected a finite positive number or inverse-sqrt",
                                 param_hint="--scale")
    return value


def _large_fixture(
    seed: int, batch: int, tokens: int, d_model: int, d_head: int,
    output: Path | None, npy_dir: str | None, force: bool,
) -> str:
    """The fixture text of a ``--generate`` or ``--npy`` starter; writes the .npy files first."""
    from qkvcli.authoring.starter import (
        dump_fixture,
        generated_fixture_document,
        npy_fixture_document,
        write_npy_atomic,
    )

    document = generated_fixture_document(seed, batch, tokens, d_model, d_head)
    if npy_dir is None or output is None:
        return dump_fixture(document)
    from qkvcli.reading.files import confined_target
    from qkvcli.reading.problems import FixtureError

    relative = npy_directory(npy_dir)
    document, arrays = npy_fixture_document(document, relative)
    base = output.parent
    try:
        # The rule run applies when it reads them, and no symbolic link leading out.
        targets = {confined_target(base, name, "--npy"): array for name, array in arrays.items()}
    except FixtureError as error:
        raise InputError(str(error)) from None
    # The fixture and its tensors are one run's outputs: none may be another (-o t/input.npy).
    refuse_same_file([*targets, output])
    if not force:
        existing = [str(path) for path in targets if path.exists()]
        if existing:
            raise InputError(f"{existing[0]}: already exists (use --force to overwrite it)")
    for path, array in targets.items():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_npy_atomic(path, array)
        except OSError as error:
            raise InputError(f"{path}: cannot write ({error.strerror or error})") from None
    return dump_fixture(document)


@click.command()
@click.option("--report", "report", metavar="NAME", default=None, is_flag=False, flag_value="",
              help="Print the JSON Schema of a report's JSON document instead: run, attend, "
              "check, gradcheck, variance or families (attend --families).")
def schema(report: str | None) -> None:
    """Print the JSON Schema of the fixture format (for editors and other tools), or with
    --report NAME the schema of that report's JSON document (draft 2020-12)."""
    if report is not None:
        from qkvcli.render.document import REPORTS, dumps
        from qkvcli.render.schemas import report_schema

        if report not in REPORTS:
            given = f"--report {report!r}" if report else "--report"
            raise InputError(f"{given}: name a report: {', '.join(REPORTS)}")
        click.echo(dumps(report_schema(report)), nl=False)
        return
    from importlib.resources import files

    from qkvcli.reading.fixture import SCHEMA_NAME

    click.echo(files("qkvcli.data").joinpath(SCHEMA_NAME).read_text(encoding="utf-8"), nl=False)


def checkpoint_fixture_text(
    checkpoint: Path, prefix: str, heads: int | None, tokens: int, seed: int,
    output: Path | None, max_elements: int | None = None, causal: bool | None = None,
    config: Path | None = None, rope: bool | None = None, scale: float | None = None,
) -> str:
    """The text of an attend fixture referencing ``checkpoint``'s tensors under ``prefix``.

    The layer's function comes from ``config`` (default: config.json beside the
    checkpoint, if there), read before any tensor's shape, or, without one, from
    ``heads`` and ``causal``, which must then be given, with ``rope`` (False:
    ``--no-rope``) and ``scale`` (0.0: ``1/sqrt(d_k)``) for a layer whose tensor names
    leave them open; given with a config they must agree with it. Each tensor's file is written
    relative to FILE's directory (the current directory without -o). A file outside it,
    or reached through a symbolic link out of it (a hub cache), is written all the same
    and a note says that attend needs --trust-paths to read it: a fixture never reads
    outside its directory unless the user says so. The input, projections and
    ``[1,H,T,T]`` scores must fit ``max_elements`` (default: attend's); above attend's
    default, a warning names the ``--max-elements`` attend needs.
    """
    from qkvcli.authoring.checkpoint import (
        check_heads,
        checkpoint_document,
        command_line_function,
        config_needed,
        layer_widths,
        options_needed,
    )
    from qkvcli.authoring.config import config_family, model_function
    from qkvcli.authoring.model_families import FAMILIES
    from qkvcli.authoring.starter import dump_fixture
    from qkvcli.authoring.tensor_names import CheckpointError
    from qkvcli.cli.inspect import read_checkpoint
    from qkvcli.core.text import printable
    from qkvcli.reading.attend import MAX_HEADS
    from qkvcli.reading.files import confined
    from qkvcli.reading.limits import DEFAULT_MAX_ELEMENTS
    from qkvcli.reading.problems import FixtureError

    if printable(prefix, None) != prefix:
        raise InputError(f"--prefix {printable(prefix)}: control characters are refused")
    entries, where = read_checkpoint(checkpoint)
    config_path = _config_path(checkpoint, config)
    # -o must not land on the config or on a shard (--force or not): init would destroy
    # what it reads. The checkpoint itself was checked before any reading.
    check_outputs([output], [config_path, *sorted(set(where.values()))])
    base = os.path.abspath(os.path.dirname(os.fspath(output)) if output is not None else ".")
    shown = printable(str(checkpoint))
    outside: list[str] = []

    def locate(name: str) -> str:
        relative = os.path.relpath(os.path.abspath(where[name]), base)
        try:  # a fixture is UTF-8 JSON: a file name of other bytes cannot be written into it
            relative.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(f"{printable(where[name])}: the file name is not UTF-8, so no "
                             "fixture can name it; rename the file (or link to it)") from None
        try:
            confined(base, relative, "--from-safetensors")
        except FixtureError:
            outside.append(relative)
        return relative.replace(os.sep, "/")

    try:
        given = _read_config(config_path)
        layout = None
        if given is not None:  # the config first: its refusals name the family or the key
            layout = FAMILIES[config_family(given[1], prefix)].naming
        naming, d_model, widths = layer_widths(entries, prefix, layout=layout)
        if given is None:
            reason = config_needed(entries, prefix)
            if reason is not None:
                raise CheckpointError(prefix, f"{reason}: put config.json beside the "
                                      "checkpoint or give --config FILE")
            function = command_line_function(heads, causal, prefix, rope, scale,
                                             options_needed(entries, prefix))
        else:
            function = model_function(given[1], prefix, tokens, widths[:2], naming, d_model)
            _agree(function, heads, causal, rope, scale, given[0], prefix)
            naming, d_model, widths = layer_widths(entries, prefix, function)
        check_heads(function, widths, prefix, MAX_HEADS)
        document, (d_model, width, value_width) = checkpoint_document(
            entries, locate, prefix, function, tokens, seed)
    except CheckpointError as error:
        raise InputError(f"{shown}: {error}") from None
    # a value input is joined after the input: the layer's input is the two (attend's d_model)
    sizes = {"input [1,T,d_model]": tokens * (d_model + (function.value_input or 0)),
             "projections [1,T,width]": tokens * max(width, value_width),
             "attention scores [1,H,T,T]": function.heads * tokens * tokens}
    limit = DEFAULT_MAX_ELEMENTS if max_elements is None else max_elements
    for label, count in sizes.items():
        if count > limit:
            raise InputError(f"--tokens {tokens} --heads {function.heads}: the {label} would "
                             f"have {count} elements, more than the limit {limit} (lower "
                             "--tokens, or raise --max-elements)")
    warn_run_limit(sizes)
    if outside:
        click.echo(f"qkv: note: {printable(outside[0])} lies outside the fixture's directory "
                   "(or links out of it, as a hub cache does): run the fixture with "
                   "qkv attend --trust-paths", err=True)
    return dump_fixture(document)


def _agree(function: ModelFunction, heads: int | None, causal: bool | None,
           rope: bool | None, scale: float | None, shown: str, prefix: str) -> None:
    """Refuse a command-line option that contradicts the config (which describes the layer)."""
    from qkvcli.authoring.tensor_names import CheckpointError

    if heads is not None and heads != function.heads:
        raise CheckpointError(prefix, f"--heads {heads} contradicts {shown}, which "
                              f"says {function.heads} heads; drop --heads")
    if causal is not None and causal != function.causal:
        flag = "--causal" if causal else "--no-causal"
        said = "causal" if function.causal else "not causal"
        raise CheckpointError(prefix, f"{flag} contradicts {shown}, which says the "
                              f"layer is {said}; drop {flag}")
    if rope is False and function.rope is not None:
        raise CheckpointError(prefix, f"--no-rope contradicts {shown}, which gives the layer "
                              "a RoPE; drop --no-rope")
    if scale is not None and (scale or None) != function.scale:
        raise CheckpointError(prefix, f"--scale contradicts {shown}, which gives the factor "
                              f"{'1/sqrt(d_k)' if function.scale is None else function.scale}; "
                              "drop --scale")


def _config_path(checkpoint: Path, config: Path | None) -> str | None:
    """The config file to read: ``config``, else config.json beside the checkpoint if there
    is one (a broken or looping link there is one too, and is refused when read), else
    ``None``."""
    if config is not None:
        return os.fspath(config)
    path = os.path.join(os.path.dirname(os.fspath(checkpoint)), "config.json")
    return path if os.path.lexists(path) else None


def _read_config(path: str | None) -> tuple[str, dict[str, object]] | None:
    """``(shown name, parsed config.json)`` of ``path``, or ``None`` without one. Raises
    :class:`InputError`."""
    from qkvcli.core.text import printable
    from qkvcli.reading.files import InputFileError, read_limited
    from qkvcli.reading.json_values import parse_json_bytes
    from qkvcli.reading.problems import FixtureError

    if path is None:
        return None
    shown = printable(path)
    if os.path.islink(path) and not os.path.exists(path):
        raise InputError(f"{shown}: a symbolic link to nothing (or a loop of links), not a "
                         "config file")
    try:
        # Strict: a key given twice has no one meaning (json and transformers keep the last).
        data = parse_json_bytes(read_limited(path, 1 << 22, "config"))
    except InputFileError as error:
        raise InputError(str(error)) from None
    except FixtureError as error:
        raise InputError(f"{shown}: not a JSON config: {error}") from None
    if not isinstance(data, dict):
        raise InputError(f"{shown}: not a model config (not a JSON object)")
    return shown, data

"""An attend fixture's ``rope``: its rotated coordinates, layout, and the frequencies, from
``theta`` (with an optional transformers ``scaling``) or given as a table; each problem
one :class:`~qkvcli.reading.problems.FixtureError` at its ``$.rope`` path."""

from __future__ import annotations

from typing import Any

import numpy as np

from qkvcli.core.errors import QkvError
from qkvcli.core.rope import (
    ROPE_LAYOUTS,
    SCALINGS,
    Rope,
    RopeScaling,
    check_scaling,
    inverse_frequencies,
)
from qkvcli.reading.files import StrPath
from qkvcli.reading.json_values import is_json_int, json_type_name, keyed_object
from qkvcli.reading.problems import FixtureError
from qkvcli.reading.tensors import parse_tensor

ROPE_KEYS = ("theta", "dims", "layout", "scaling", "frequencies")
SCALING_KEYS = {  # each scaling type's keys beside "type"
    "linear": ("factor",),
    "dynamic": ("factor", "max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "truncate",
             "attention_factor", "mscale", "mscale_all_dim"),
    "longrope": ("factor", "original_max_position_embeddings", "short_factor", "long_factor",
                 "attention_factor"),
    "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor",
               "high_freq_factor"),
}
SCALING_OPTIONAL = ("beta_fast", "beta_slow", "truncate", "attention_factor", "mscale",
                    "mscale_all_dim")
"""The keys of a fixture's ``rope.scaling`` per type, each required but
:data:`SCALING_OPTIONAL`: transformers' ``rope_parameters`` with the lengths resolved
(YaRN's ``beta_fast`` 32, ``beta_slow`` 1, ``truncate`` true; YaRN's and LongRoPE's
``attention_factor`` its default, :func:`qkvcli.core.rope.attention_factor`)."""
MAX_ROPE_DIMS = 1 << 20  # rotated coordinates of a head: never wider than the limits


def positive_number(raw: Any, location: str) -> float:
    """A finite positive number at ``location``. Raises :class:`FixtureError`."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise FixtureError(location, f"expected a number, got {json_type_name(raw)}")
    try:
        value = float(raw)
    except OverflowError:  # an integer of hundreds of digits: past float64's range
        value = float("inf")
    if not (value > 0.0 and value < float("inf")):
        shown = repr(raw) if len(str(raw)) <= 40 else f"a number of {len(str(raw))} digits"
        raise FixtureError(location, f"must be a finite positive number, got {shown}")
    return value


def read_rope(raw: Any, max_elements: int, base_dir: StrPath | None) -> Rope:
    """``rope``: ``dims``, ``layout`` and the frequencies, from ``theta`` (with an optional
    ``scaling``) or given as ``frequencies`` (:func:`read_frequencies`), one of the two."""
    keyed_object(raw, "$.rope", ROPE_KEYS, ("dims",))
    given = [key for key in ("theta", "frequencies") if raw.get(key) is not None]
    if len(given) != 1:
        raise FixtureError("$.rope", 'give "theta" (the frequencies theta^(-2i/dims)) or '
                           '"frequencies" (a table of them, one per pair)' + (
                               ", not both" if given else ""))
    dims = raw["dims"]
    if not is_json_int(dims) or dims < 2 or dims % 2:
        raise FixtureError("$.rope.dims", "expected an even integer of at least 2 (the rotated "
                           "coordinates of each head)")
    layout = raw.get("layout", "half")
    if layout not in ROPE_LAYOUTS:
        shown = f'"{layout}"' if isinstance(layout, str) else json_type_name(layout)
        raise FixtureError("$.rope.layout", f'expected "half" or "interleaved", got {shown}')
    if dims > MAX_ROPE_DIMS:
        raise FixtureError("$.rope.dims", f"must be at most {MAX_ROPE_DIMS}, got {dims}")
    if given == ["frequencies"]:
        if raw.get("scaling") is not None:
            raise FixtureError("$.rope.scaling", 'a scaling changes the frequencies of a '
                               'theta: it needs "theta", not "frequencies"')
        return Rope(None, int(dims), str(layout), frequencies=read_frequencies(
            raw["frequencies"], int(dims), max_elements, base_dir))
    scaling = read_scaling(raw["scaling"], int(dims)) if raw.get("scaling") is not None else None
    rope = Rope(positive_number(raw["theta"], "$.rope.theta"), int(dims), str(layout), scaling=scaling)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        finite = bool(np.all(np.isfinite(inverse_frequencies(rope))))
    if not finite:  # a theta so near 0 that theta^(-2i/dims) overflows: every angle NaN
        raise FixtureError("$.rope.theta", f"theta {rope.theta!r} makes the rotation "
                           f"frequencies theta^(-2i/{rope.dims}) overflow float64")
    return rope


def read_frequencies(raw: Any, dims: int, max_elements: int,
                     base_dir: StrPath | None) -> tuple[float, ...]:
    """``rope.frequencies``: any tensor source (a checkpoint's ``inv_freq`` as stored, its
    dtype widened exactly), of rank one, one frequency per pair (``dims / 2``), each
    finite and positive. Raises :class:`FixtureError` at ``$.rope.frequencies``."""
    location = "$.rope.frequencies"
    table = parse_tensor(raw, location, max_elements, base_dir=base_dir)
    if table.shape != (dims // 2,):
        raise FixtureError(location, f"expected [{dims // 2}] (one frequency per pair of the "
                           f"{dims} rotated coordinates), got [{','.join(map(str, table.shape))}]")
    bad = np.flatnonzero(~(np.isfinite(table) & (table > 0.0)))
    if bad.size:
        raise FixtureError(location, f"each frequency must be finite and positive, got "
                           f"{float(table[bad[0]])!r} at pair {int(bad[0])}")
    return tuple(float(value) for value in table)


def read_scaling(raw: Any, dims: int) -> RopeScaling:
    """A fixture's ``rope.scaling``: its ``type`` and that type's keys (:data:`SCALING_KEYS`)."""
    where = "$.rope.scaling"
    if not isinstance(raw, dict):
        raise FixtureError(where, f"expected an object, got {json_type_name(raw)}")
    kind = raw.get("type")
    if kind not in SCALINGS:
        raise FixtureError(f"{where}.type", f"expected one of {', '.join(SCALINGS)}, got "
                           f"{json_type_name(kind) if not isinstance(kind, str) else repr(kind)}")
    keyed_object(raw, where, ("type", *SCALING_KEYS[kind]),
                 [k for k in SCALING_KEYS[kind] if k not in SCALING_OPTIONAL])
    fields: dict[str, Any] = {"kind": kind}
    for key, value in raw.items():
        at = f"{where}.{key}"
        if key in ("type",):
            continue
        if key in ("short_factor", "long_factor"):
            if not isinstance(value, list) or len(value) != dims // 2:
                raise FixtureError(at, f"expected a list of {dims // 2} numbers (one per pair)")
            fields[key] = tuple(positive_number(v, f"{at}[{i}]") for i, v in enumerate(value))
        elif key == "truncate":
            if not isinstance(value, bool):
                raise FixtureError(at, f"expected true or false, got {json_type_name(value)}")
            fields[key] = value
        elif key in ("max_position_embeddings", "original_max_position_embeddings"):
            if not is_json_int(value) or value < 1:
                raise FixtureError(at, "expected a positive integer")
            fields["original"] = int(value)
        else:
            fields[key] = positive_number(value, at)
    scaling = RopeScaling(**fields)
    try:
        check_scaling(scaling, dims)
    except QkvError as error:  # the maths' RopeError
        raise FixtureError(where, str(error)) from None
    return scaling

"""What ``qkv inspect`` recognises in a checkpoint, and the fixture ``qkv init --from-safetensors`` writes.

Recognised attention projections (by the end of a tensor's name):

* GPT-2 (Conv1D, ``[in, out]``): ``attn.c_attn.weight/bias`` (query|key|value packed on
  the last axis) and ``attn.c_proj.weight/bias`` (the output projection);
* Hugging Face (``nn.Linear``, ``[out, in]``): ``q_proj``, ``k_proj``, ``v_proj``,
  ``o_proj``, or BERT's ``query``, ``key``, ``value``.

The fixture references the checkpoint's tensors (nothing is copied) and adds a seeded
input ``[1, tokens, d_model]`` drawn uniform in ``[-1, 1)`` by a ``generate`` spec.
"""

from __future__ import annotations

from typing import Any

from qkvcli.core.errors import QkvError
from qkvcli.core.names import BRANCHES
from qkvcli.core.splitmix import MASK64

Entry = tuple[str, str, tuple[int, ...]]  # name, dtype, shape

ROLES = (
    ("attn.c_attn.weight", "GPT-2 c_attn weight: query|key|value packed, Conv1D [d_model,3*W]"),
    ("attn.c_attn.bias", "GPT-2 c_attn bias: query|key|value packed [3*W]"),
    ("attn.c_proj.weight", "GPT-2 c_proj weight: output projection, Conv1D [H*d_v,E_out]"),
    ("attn.c_proj.bias", "GPT-2 c_proj bias: output projection [E_out]"),
    *((f"{short}.{part}", f"{branch} projection {part} (torch layout [out,in])")
      for short, branch in (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value"),
                            ("o_proj", "output"), ("query", "query"), ("key", "key"),
                            ("value", "value"))
      for part in ("weight", "bias")),
)
# Mixes the input's seed so it is not the weights' seed (a fixture-wide convention).
INPUT_SEED_TAG = 0x51CE_0001


class CheckpointError(QkvError):
    """The checkpoint has no attention projections under ``prefix``; ``found`` names what it has."""

    def __init__(self, prefix: str, problem: str) -> None:
        self.prefix = prefix
        self.problem = problem
        super().__init__(f"prefix {prefix!r}: {problem}")


def role_of(name: str) -> str | None:
    """What a tensor is, if it is an attention projection qkv recognises, else ``None``."""
    for suffix, role in ROLES:
        if name == suffix or name.endswith("." + suffix):
            return role
    return None


def _matrix(shapes: dict[str, tuple[int, ...]], prefix: str, name: str) -> tuple[int, int]:
    """The shape of the rank-2 tensor ``prefix + name``. Raises :class:`CheckpointError`."""
    shape = shapes[prefix + name]
    if len(shape) != 2 or 0 in shape:
        raise CheckpointError(prefix, f"{name} has shape [{','.join(map(str, shape))}], "
                              "not a non-empty matrix")
    return shape[0], shape[1]


def checkpoint_document(
    entries: list[Entry], checkpoint: str, prefix: str, heads: int, tokens: int, seed: int
) -> tuple[dict[str, Any], tuple[int, int, int]]:
    """An attend fixture referencing the projections under ``prefix`` in ``checkpoint``,
    and the layer's ``(d_model, query/key width, value width)``.

    ``checkpoint`` is the path relative to the fixture's directory. Supports GPT-2's
    ``c_attn``/``c_proj`` and Hugging Face's ``q_proj``/``k_proj``/``v_proj``/``o_proj``
    (or ``query``/``key``/``value``). Raises :class:`CheckpointError` (no projections
    under ``prefix``, or a weight that is not a matrix of a usable width).
    """
    shapes = {name: shape for name, _, shape in entries}

    def ref(suffix: str) -> dict[str, str] | None:
        name = prefix + suffix
        return {"safetensors": checkpoint, "tensor": name} if name in shapes else None

    weights: dict[str, Any] = {}
    if ref("c_attn.weight") is not None:
        d_model, packed = _matrix(shapes, prefix, "c_attn.weight")
        if packed % 3:
            raise CheckpointError(prefix, f"c_attn.weight's width {packed} is not 3 equal "
                                  "parts (query|key|value)")
        widths = (packed // 3, packed // 3)
        weights["c_attn_weight"] = ref("c_attn.weight")
        weights["c_attn_bias"] = ref("c_attn.bias")
        if ref("c_proj.weight") is not None:
            weights["c_proj_weight"] = ref("c_proj.weight")
            weights["c_proj_bias"] = ref("c_proj.bias")
    else:
        names = next((trio for trio in (("q_proj", "k_proj", "v_proj"), ("query", "key", "value"))
                      if all(ref(f"{short}.weight") for short in trio)), None)
        if names is None:
            raise CheckpointError(prefix, "no c_attn.weight, q_proj/k_proj/v_proj or "
                                  "query/key/value weights under it (qkv inspect lists the names)")
        rows = [_matrix(shapes, prefix, f"{short}.weight") for short in names]  # [out, in]
        d_model = rows[0][1]
        widths = (rows[0][0], rows[2][0])
        for branch, short in zip(BRANCHES, names, strict=True):
            entry: dict[str, Any] = {"layout": "torch", **(ref(f"{short}.weight") or {})}
            if ref(f"{short}.bias") is not None:
                entry["bias"] = ref(f"{short}.bias")
            weights[branch] = entry
        if ref("o_proj.weight") is not None:
            weights["out_proj_weight"] = ref("o_proj.weight")
            weights["out_proj_bias"] = ref("o_proj.bias")
    weights = {key: value for key, value in weights.items() if value is not None}
    document = {
        "chapter": f"{prefix.rstrip('.') or 'checkpoint'}-{heads}-heads",
        "seed": seed,
        "heads": heads,
        "input": {"generate": {"seed": (seed ^ INPUT_SEED_TAG) & MASK64,
                               "shape": [1, tokens, d_model]}},
        "weights": weights,
        # A real layer has millions of coordinates: check an even sample of each tensor.
        "gradcheck": {"samples": 16},
    }
    return document, (d_model, widths[0], widths[1])

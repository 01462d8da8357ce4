"""Write a tiny GPT-2-shaped checkpoint and its config.json with NumPy alone.

    python examples/checkpoints/tiny_gpt2.py [--bf16] [DIRECTORY]

Writes DIRECTORY/model.safetensors (one attention layer, ``transformer.h.0.attn.``:
``c_attn`` and ``c_proj``, weights and biases, seeded random values, float32, or
bfloat16 with ``--bf16``) and DIRECTORY/config.json (``gpt2``, ``n_embd`` 8, ``n_head`` 2).
The format is small enough to write by hand: an 8-byte little-endian header length, a
JSON header naming each tensor's dtype, shape and byte range, then the bytes. No
``safetensors``, ``torch`` or ``transformers`` is needed, so it runs in the venv the
README makes with ``pip install .``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

PREFIX = "transformer.h.0.attn."
D_MODEL = 8
SHAPES = {"c_attn.weight": (D_MODEL, 3 * D_MODEL), "c_attn.bias": (3 * D_MODEL,),
          "c_proj.weight": (D_MODEL, D_MODEL), "c_proj.bias": (D_MODEL,)}


def tensor_bytes(values: np.ndarray, bf16: bool) -> bytes:
    """``values`` as little-endian float32 bytes, or bfloat16 bytes (float32's upper half,
    rounded to nearest even)."""
    single = values.astype("<f4")
    if not bf16:
        return single.tobytes()
    words = single.view("<u4").astype(np.uint64)
    rounded = (words + 0x7FFF + ((words >> 16) & 1)) >> 16  # round to nearest, ties to even
    return rounded.astype("<u2").tobytes()


def write(directory: Path, bf16: bool) -> None:
    """Write the checkpoint and its config into ``directory``."""
    generator = np.random.default_rng(0)
    header: dict[str, object] = {}
    data = b""
    for name, shape in SHAPES.items():
        chunk = tensor_bytes(generator.normal(size=shape), bf16)
        header[PREFIX + name] = {"dtype": "BF16" if bf16 else "F32", "shape": list(shape),
                                 "data_offsets": [len(data), len(data) + len(chunk)]}
        data += chunk
    text = json.dumps(header).encode("utf-8")
    (directory / "model.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + data)
    config = {"model_type": "gpt2", "n_embd": D_MODEL, "n_head": 2}
    (directory / "config.json").write_text(json.dumps(config) + "\n", encoding="utf-8")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    half = "--bf16" in arguments
    rest = [argument for argument in arguments if argument != "--bf16"]
    write(Path(rest[0]) if rest else Path("."), half)

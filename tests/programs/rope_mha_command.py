"""examples/implementations/numpy_rope_mha.py as a ``--command`` program: RoPE and
multi-head attention over the JSON-lines protocol, with the slip named on the command
line switched on (``python rope_mha_command.py half-split``; none: correct)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "implementations"))
import numpy_rope_mha

SCALARS = ("heads", "causal", "rope", "base", "offset")
FIELDS = {
    "rope": (("input", "base", "offset"), ("rotated",)),
    "rope_reverse": (("input", "base", "offset"), ("turned_back",)),
    "mha_forward": (("input", "w_query", "w_key", "w_value", "w_output", *SCALARS),
                    ("weights", "merged", "output")),
    "mha_backward": (("input", "w_query", "w_key", "w_value", "w_output", *SCALARS,
                      "grad_output"),
                     ("grad_input", "grad_w_query", "grad_w_key", "grad_w_value",
                      "grad_w_output")),
}


def _argument(request: dict[str, Any], key: str) -> Any:
    if key in SCALARS:
        return request[key]
    field = request[key]
    return np.array(field["values"], dtype=np.float64).reshape(field["shape"])


def main() -> None:
    numpy_rope_mha.BUG = sys.argv[1] if len(sys.argv) > 1 else ""
    for line in sys.stdin:
        request = json.loads(line)
        reply: dict[str, Any] = {"id": request["id"]}
        op = request["op"]
        if op == "hello":
            reply.update(version=1, ops=list(FIELDS))
        elif op in FIELDS:
            keys, names = FIELDS[op]
            try:
                results = getattr(numpy_rope_mha, op)(*(_argument(request, k) for k in keys))
                results = results if isinstance(results, tuple) else (results,)
                if not all(np.isfinite(r).all() for r in results):
                    raise ValueError("a result is not finite")
                reply.update({n: {"shape": list(r.shape), "values": r.reshape(-1).tolist()}
                              for n, r in zip(names, results, strict=True)})
            except (ValueError, ZeroDivisionError, IndexError) as error:
                reply["error"] = str(error)
        elif op != "bye":
            reply["error"] = f"unknown op {op}"
        print(json.dumps(reply), flush=True)
        if op == "bye":
            break


if __name__ == "__main__":
    main()

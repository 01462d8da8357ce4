"""A learner's attention head in NumPy with one slip switched on: the tests' wrong heads.

``head(slip)`` gives ``(head_forward, head_backward)`` making that slip (``""``: none),
written as a learner writes them, from docs/protocol.md's formulas and not from qkv's
engine. Run as a program (``python slip_head.py SLIP``) it speaks the ``--command``
protocol with the slip switched on (head operations only).

The slips: ``query-axis`` (softmax over the query axis), ``global-max`` (the whole
tensor's maximum subtracted), ``transposed-scores`` (S = K Qᵀ), ``float32``,
``sqrt-d_model`` (scores divided by sqrt(d_model)), ``hides-earlier``, ``hides-diagonal``
(both with -inf where a row keeps a key), ``leaks-future`` (one later key seen),
``after-softmax``, ``backward-ignores-mask``, ``dw-one-item`` (each weight gradient
overwritten by each batch item), ``rowsum-axis``, ``elementwise`` (``A(1-A)dA``).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

SLIPS = ("query-axis", "global-max", "transposed-scores", "float32", "sqrt-d_model",
         "hides-earlier", "hides-diagonal", "leaks-future", "after-softmax",
         "backward-ignores-mask", "dw-one-item", "rowsum-axis", "elementwise")


def _validate(x: Any, wq: Any, wk: Any, wv: Any) -> None:
    if x.ndim != 3 or x.shape[2] != wq.shape[0] or not wq.shape == wk.shape == wv.shape:
        raise ValueError(f"bad shapes {x.shape} {wq.shape} {wk.shape} {wv.shape}")


def head(slip: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``(head_forward, head_backward)`` with ``slip`` (one of :data:`SLIPS`, or ``""``)."""
    assert slip in ("", *SLIPS), slip

    def hidden(tokens: int) -> Any:
        later = np.triu(np.ones((tokens, tokens), dtype=bool), k=1)
        if slip == "hides-earlier":
            return later | np.tril(np.ones((tokens, tokens), dtype=bool), k=-2)  # j < i-1
        if slip == "hides-diagonal":
            return later | (np.eye(tokens, dtype=bool) & (np.arange(tokens) > 0)[:, None])
        if slip == "leaks-future":
            return np.triu(np.ones((tokens, tokens), dtype=bool), k=2)  # key i+1 seen
        return later

    def softmax(z: Any) -> Any:
        if z.size == 0:
            return z
        if slip == "query-axis":
            e = np.exp(z - np.max(z, axis=-2, keepdims=True))
            return e / np.sum(e, axis=-2, keepdims=True)
        e = np.exp(z - (np.max(z) if slip == "global-max" else np.max(z, axis=-1, keepdims=True)))
        return e / np.sum(e, axis=-1, keepdims=True)

    def forward(x: Any, wq: Any, wk: Any, wv: Any, causal: bool, masked: bool = True) -> Any:
        _validate(x, wq, wk, wv)
        if slip == "float32":
            x, wq, wk, wv = (a.astype(np.float32) for a in (x, wq, wk, wv))
        q, k, v = x @ wq, x @ wk, x @ wv
        width = x.shape[2] if slip == "sqrt-d_model" else wq.shape[1]
        first, second = (k, q) if slip == "transposed-scores" else (q, k)
        scores = first @ np.swapaxes(second, -1, -2) / math.sqrt(width)
        tokens = x.shape[1]
        mask = hidden(tokens) if causal and masked else None
        if mask is not None and slip != "after-softmax":
            weights = softmax(np.where(mask, -np.inf, scores))
        else:
            weights = softmax(scores)
        if mask is not None and slip == "after-softmax":
            weights = np.where(mask, 0.0, weights)
        return q, k, v, scores, weights, weights @ v

    def head_forward(x: Any, wq: Any, wk: Any, wv: Any, causal: bool) -> Any:
        _, _, _, scores, weights, output = forward(x, wq, wk, wv, causal)
        return scores, weights, output

    def head_backward(x: Any, wq: Any, wk: Any, wv: Any, causal: bool, grad_output: Any) -> Any:
        q, k, v, _, a, _ = forward(x, wq, wk, wv, causal,
                                   masked=slip != "backward-ignores-mask")
        batch, tokens, d_model = x.shape
        if grad_output.shape != (batch, tokens, wv.shape[1]):
            raise ValueError(f"grad_output has shape {grad_output.shape}")
        grad_a = grad_output @ np.swapaxes(v, -1, -2)
        grad_v = np.swapaxes(a, -1, -2) @ grad_output
        if slip == "elementwise":
            grad_z = a * (1 - a) * grad_a
        else:
            axis = -2 if slip == "rowsum-axis" else -1
            grad_z = a * (grad_a - np.sum(grad_a * a, axis=axis, keepdims=True))
        grad_s = grad_z / math.sqrt(wq.shape[1])
        grad_q, grad_k = grad_s @ k, np.swapaxes(grad_s, -1, -2) @ q
        grads = (grad_q, grad_k, grad_v)
        grad_input = sum(g @ w.T for g, w in zip(grads, (wq, wk, wv), strict=True))
        if slip == "dw-one-item":
            grad_w = [np.zeros_like(wq) for _ in grads]
            for item in range(batch):  # = instead of +=: the last item's alone
                grad_w = [x[item].T @ g[item] for g in grads]
        else:
            rows = x.reshape(batch * tokens, d_model)
            grad_w = [rows.T @ g.reshape(batch * tokens, g.shape[-1]) for g in grads]
        return (grad_input + np.zeros_like(x), *grad_w)

    return head_forward, head_backward


def _tensor(request: dict[str, Any], key: str) -> Any:
    field = request[key]
    return np.array(field["values"], dtype=np.float64).reshape(field["shape"])


def _written(array: Any) -> dict[str, Any]:
    return {"shape": list(array.shape), "values": np.asarray(array, dtype=np.float64)
            .reshape(-1).tolist()}


def main(slip: str) -> None:
    """Answer qkv's head requests on stdin with ``slip``, one JSON line each."""
    head_forward, head_backward = head(slip)
    for line in sys.stdin:
        request = json.loads(line)
        reply: dict[str, Any] = {"id": request["id"]}
        op = request["op"]
        if op == "hello":
            reply.update(version=1, ops=["head_forward", "head_backward"])
        elif op in ("head_forward", "head_backward"):
            args = [_tensor(request, k) for k in ("input", "w_query", "w_key", "w_value")]
            names: tuple[str, ...]
            try:
                if op == "head_forward":
                    names = ("scores", "weights", "output")
                    results = head_forward(*args, request["causal"])
                else:
                    names = ("grad_input", "grad_w_query", "grad_w_key", "grad_w_value")
                    results = head_backward(*args, request["causal"],
                                            _tensor(request, "grad_output"))
                if not all(np.isfinite(r).all() for r in results):
                    raise ValueError("a result is not finite")
                reply.update({n: _written(r) for n, r in zip(names, results, strict=True)})
            except ValueError as error:
                reply["error"] = str(error)
        elif op != "bye":
            reply["error"] = f"unknown op {op}"
        print(json.dumps(reply), flush=True)
        if op == "bye":
            break


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")

#!/usr/bin/env python3
"""A correct ``--command`` program: Q/K/V projections over the JSON lines protocol.

    qkv check --command "python3 examples/implementations/command_qkv.py"

Standard library only, so it reads like the protocol itself (docs/protocol.md): one
JSON object per line on stdin, one reply per line on stdout, nothing else on stdout.
Python's ``json`` writes floats with ``repr`` (shortest round-trip), so values cross
the pipe exactly.
"""

import json
import sys


def tensor(message, key):
    t = message[key]
    return t["shape"], t["values"]


def matmul(a, a_rows, a_cols, b, b_cols, transpose_b=False):
    """Row-major [a_rows, a_cols] @ [a_cols, b_cols] (b given as [b_cols, a_cols] if transposed)."""
    out = []
    for i in range(a_rows):
        row = a[i * a_cols:(i + 1) * a_cols]
        for j in range(b_cols):
            total = 0.0
            for k in range(a_cols):
                w = b[j * a_cols + k] if transpose_b else b[k * b_cols + j]
                total += row[k] * w
            out.append(total)
    return out


def shapes(message):
    x_shape, _ = tensor(message, "input")
    w_shapes = [tensor(message, k)[0] for k in ("w_query", "w_key", "w_value")]
    if len(x_shape) != 3:
        raise ValueError(f"input must have rank 3, got rank {len(x_shape)}")
    if any(len(s) != 2 for s in w_shapes):
        raise ValueError("weights must have rank 2")
    if len({s[0] for s in w_shapes}) != 1:
        raise ValueError("Q/K/V model widths must match")
    if len({s[1] for s in w_shapes}) != 1:
        raise ValueError("Q/K/V head widths must match")
    batch, tokens, d_model = x_shape
    if d_model != w_shapes[0][0]:
        raise ValueError("input width must equal the model width")
    return batch, tokens, d_model, w_shapes[0][1]


def forward(message):
    batch, tokens, d_model, d_head = shapes(message)
    x = message["input"]["values"]
    reply = {}
    for out, key in (("query", "w_query"), ("key", "w_key"), ("value", "w_value")):
        values = matmul(x, batch * tokens, d_model, message[key]["values"], d_head)
        reply[out] = {"shape": [batch, tokens, d_head], "values": values}
    return reply


def backward(message):
    batch, tokens, d_model, d_head = shapes(message)
    rows = batch * tokens
    x = message["input"]["values"]
    grad_input = [0.0] * (rows * d_model)
    reply = {}
    for branch in ("query", "key", "value"):
        g_shape, g = tensor(message, f"grad_{branch}")
        if g_shape != [batch, tokens, d_head]:
            raise ValueError(f"grad_{branch} has shape {g_shape}")
        w = message[f"w_{branch}"]["values"]
        # dX += dY W^T: [BT,h] @ [h,d]; W is [d,h] row-major, so read it transposed.
        path = matmul(g, rows, d_head, w, d_model, transpose_b=True)
        grad_input = [a + b for a, b in zip(grad_input, path, strict=True)]
        # dW = X^T dY: [d,BT] @ [BT,h], branch-local.
        x_t = [x[r * d_model + i] for i in range(d_model) for r in range(rows)]
        reply[f"grad_w_{branch}"] = {"shape": [d_model, d_head],
                                     "values": matmul(x_t, d_model, rows, g, d_head)}
    return {"grad_input": {"shape": [batch, tokens, d_model], "values": grad_input}, **reply}


def main():
    for line in sys.stdin:
        message = json.loads(line)
        ident = message["id"]
        op = message["op"]
        if op == "hello":
            reply = {"id": ident, "version": 1}
        elif op == "bye":
            print(json.dumps({"id": ident}), flush=True)
            return
        else:
            try:
                reply = {"id": ident, **(forward(message) if op == "forward" else backward(message))}
            except ValueError as error:
                reply = {"id": ident, "error": str(error)}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()

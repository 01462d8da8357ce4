"""A --command program with a correct backward and forward whose number writer is lossy.

    python lossy_qkv.py MODE

MODE: decimals (every number written with ``%.6f``), digits (``%g``: 6 significant
digits) or float32 (every number rounded to float32, then written exactly).
Otherwise it answers like examples/implementations/command_qkv.py.
"""

import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "implementations"))

import command_qkv  # noqa: E402

MODE = sys.argv[1]


def spell(value):
    if MODE == "decimals":
        return f"{value:.6f}"
    if MODE == "digits":
        return f"{value:g}"
    return repr(struct.unpack("f", struct.pack("f", value))[0])


def write(message):
    text = json.dumps(message)
    for tensor in message.values():
        if isinstance(tensor, dict):
            values = ",".join(spell(v) for v in tensor["values"])
            text = text.replace(json.dumps(tensor["values"]), f"[{values}]", 1)
    print(text, flush=True)


def main():
    for line in sys.stdin:
        message = json.loads(line)
        ident, op = message["id"], message["op"]
        if op == "hello":
            write({"id": ident, "version": 1})
        elif op == "bye":
            write({"id": ident})
            return
        else:
            try:
                body = (command_qkv.forward(message) if op == "forward"
                        else command_qkv.backward(message))
                write({"id": ident, **body})
            except ValueError as error:
                write({"id": ident, "error": str(error)})


if __name__ == "__main__":
    main()

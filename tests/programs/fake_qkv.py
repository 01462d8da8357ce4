"""A --command program that misbehaves on purpose, for the protocol tests.

    python fake_qkv.py MODE

MODE: crash (exit 3 at the first forward, after a line on stderr), sleep (never answer
a forward), garbage (answer a forward with a line that is not JSON), nan (answer with
NaN), wrong-id, linger (answer bye but do not exit), bad-version, forward-only (hello
advertises "ops": ["forward"]), bad-ops (hello with "ops": "forward"), version-true and
version-null (hello answers "version": true or null), log-line (a log line on stdout
before its first reply).
With FAKE_QKV_READY=FILE in the environment, sleep writes its pid to FILE before sleeping.
Otherwise it answers like examples/implementations/command_qkv.py.
"""

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "implementations"))

import command_qkv  # noqa: E402


def reply(message):
    print(json.dumps(message), flush=True)


def main():
    mode = sys.argv[1]
    if mode == "log-line":
        print("starting up", flush=True)
    for line in sys.stdin:
        message = json.loads(line)
        ident, op = message["id"], message["op"]
        if op == "hello":
            version = {"bad-version": 2, "version-true": True, "version-null": None}
            hello = {"id": ident, "version": version.get(mode, 1)}
            if mode in ("forward-only", "bad-ops"):
                hello["ops"] = ["forward"] if mode == "forward-only" else "forward"
            reply(hello)
            continue
        if op == "bye":
            reply({"id": ident})
            if mode == "linger":
                time.sleep(30)
            return
        if mode == "crash":
            sys.stderr.write("fake_qkv: segmentation fault (pretend)\n")
            sys.exit(3)
        if mode == "sleep":
            ready = os.environ.get("FAKE_QKV_READY")
            if ready:
                with open(ready + ".tmp", "w") as file:
                    file.write(str(os.getpid()))
                os.replace(ready + ".tmp", ready)
            time.sleep(30)
        if mode == "garbage":
            print("this is not json", flush=True)
            continue
        if mode == "nan":
            print('{"id": ' + str(ident) + ', "query": {"shape": [1], "values": [NaN]}}', flush=True)
            continue
        if mode == "wrong-id":
            ident += 100
        if mode == "forward-only" and op == "backward":
            reply({"id": ident, "error": "qkv should not ask: hello said no backward"})
            continue
        try:
            body = command_qkv.forward(message) if op == "forward" else command_qkv.backward(message)
            reply({"id": ident, **body})
        except ValueError as error:
            reply({"id": ident, "error": str(error)})


if __name__ == "__main__":
    main()

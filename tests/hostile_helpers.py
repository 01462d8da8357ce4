"""Shared helpers of the hostile-input tests: a small valid fixture and one invocation."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from qkvcli.cli import main

BASE: dict[str, Any] = {
    "input": [[[1, 2, -1], [0, 1, 2]]],
    "weights": {
        "query": [[1, 0], [0, 1], [1, -1]],
        "key": [[0, 1], [1, 0], [-1, 1]],
        "value": [[1, 1], [1, -1], [0, 2]],
    },
}


def fixture(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data.update(changes)
    return data


def write(path: Path, data: Any) -> Path:
    if isinstance(data, bytes):
        path.write_bytes(data)
    elif isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_text(json.dumps(data), encoding="utf-8")
    return path


def invoke(*args: str, stdin: bytes | None = None) -> Any:
    return CliRunner().invoke(main, list(args), input=stdin)


def refused(result: Any, *parts: str) -> str:
    """Assert exit 2 with one ``Error:`` line holding every part; return the line."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert lines, result.stderr
    for part in parts:
        assert part in lines[0], (part, lines[0])
    assert "\x1b" not in result.stderr
    return lines[0]


def json_paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every location inside a JSON value, as a tuple of keys and indices (the fuzz mutates these)."""
    found = [prefix]
    if isinstance(node, dict):
        for key, child in node.items():
            found += json_paths(child, (*prefix, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found += json_paths(child, (*prefix, index))
    return found

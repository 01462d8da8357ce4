"""Helpers of the explorer's tests: pages written by the CLI, their numbers, a GPT-2-small layer."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from qkvcli.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "implementations"
MIB = 1 << 20


def write_page(folder: Path, *args: str, name: str = "page.html") -> str:
    """Run ``qkv ARGS --html FILE -o OUT`` in ``folder`` and give the page's text."""
    page, text = folder / name, folder / f"{name}.txt"
    result = CliRunner().invoke(main, [*args, "--html", str(page), "-o", str(text)],
                                catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    assert f"qkv: wrote {page}" in result.output
    return page.read_text(encoding="utf-8")


def page_data(html: str) -> dict[str, Any]:
    """The page's embedded JSON (labels and derivations)."""
    start = html.index('<script type="application/json" id="qkv-data">')
    start = html.index(">", start) + 1
    document: dict[str, Any] = json.loads(html[start:html.index("</script>", start)])
    return document


class Numbers(HTMLParser):
    """Every element carrying ``data-tensor``: its tag, attributes and text."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if "data-tensor" in attributes:
            self.open = {"tag": tag, **attributes, "text": ""}
            self.found.append(self.open)

    def handle_data(self, data: str) -> None:
        if self.open is not None:
            self.open["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if self.open is not None and tag == self.open["tag"]:
            self.open = None


def numbers_of(html: str) -> list[dict[str, Any]]:
    parser = Numbers()
    parser.feed(html)
    return parser.found


def gpt2_fixture(folder: Path) -> Path:
    """A GPT-2-small attention layer at T=1024 (generated weights in c_attn/c_proj
    layout, causal, 16 samples per tensor as ``qkv init`` writes)."""
    def generate(seed: int, shape: list[int], scale: float = 0.02) -> dict[str, Any]:
        return {"generate": {"seed": seed, "shape": shape, "distribution": "normal",
                             "scale": scale}}

    path = folder / "gpt2-layer.json"
    path.write_text(json.dumps({
        "heads": 12, "causal": True,
        "input": generate(7, [1, 1024, 768], 1.0),
        "weights": {"c_attn_weight": generate(1, [768, 2304]),
                    "c_attn_bias": generate(2, [2304]),
                    "c_proj_weight": generate(3, [768, 768]),
                    "c_proj_bias": generate(4, [768])},
        "gradcheck": {"samples": 16},
    }), encoding="utf-8")
    return path


_GPT2: dict[str, Path] = {}


def gpt2_page(factory: pytest.TempPathFactory) -> Path:
    """The explorer page of the GPT-2-small layer, written once per test session."""
    if "page" not in _GPT2:
        folder = factory.mktemp("gpt2")
        write_page(folder, "attend", str(gpt2_fixture(folder)), name="gpt2.html")
        _GPT2["page"] = folder / "gpt2.html"
    return _GPT2["page"]


def unexplained(html: str) -> list[str]:
    """The numbers of a page whose panel opens neither terms nor "given by the fixture":
    each as ``tensor|index`` (with its field or statistic), as the page's script looks
    them up."""
    data = page_data(html)
    given = set(data["given"])
    missing = []
    for number in numbers_of(html):
        key = "|".join((number["data-tensor"], number["data-index"])) + "".join(
            f"|{number[a]}" for a in ("data-variant",) if number.get(a))
        if number.get("data-stat") and not number["data-index"]:
            key += f"|{number['data-stat']}"
        derivations = data["derivations"]
        if (key in derivations or f"{number['data-tensor']}|*" in derivations
                or number["data-tensor"] in given):
            continue
        missing.append(key + "".join(f" {number[a]}" for a in ("data-field", "data-stat")
                                     if number.get(a)))
    return missing


LAYER = {"heads": 2, "causal": True, "input": [[[0.5, -1.0, 0.25, 2.0], [1.0, 0.5, -0.5, 0.0],
                                                [-1.5, 0.25, 1.0, 0.5]]],
         "weights": {branch: {"values": [[0.5 * ((i + 2 * j + k) % 5) - 1.0 for j in range(4)]
                                         for i in range(4)], "layout": "torch",
                              "bias": [0.1 * (j - k) for j in range(4)]}
                     for k, branch in enumerate(("query", "key", "value"))}}
"""A small two-head causal layer with biases (torch layout), for attend's layer page."""

CH37_SHAPE = (2, 4, 2, 4, 5, 7, 10000.0)
"""A random chapter-37 fixture's shape (batch, tokens, heads, head width, capacity, RoPE
rows, base; tests/test_chapter37.py's form), its layout ``half``."""


CH37_LONG = (1, 32, 4, 16, 32, 32, 10000.0)
"""A chapter-37 fixture of 32 tokens of width 64 (four heads of 16): every step drawn
in full would make a page of about 15 MB."""


def ch37_fixture(folder: Path, seed: int = 5, shape: tuple[Any, ...] = CH37_SHAPE) -> Path:
    """A random chapter-37 fixture (random weights and input) written into ``folder``."""
    from tests.test_chapter37 import random_document

    path = folder / f"ch37-{seed}.json"
    path.write_text(json.dumps(random_document(seed, shape)), encoding="utf-8")
    return path


PAGES: dict[str, list[str]] = {
    **{f"run-ch{n}": ["run", "--chapter", str(n)] for n in (26, 27, 28, 29, 30, 37)},
    **{f"report-ch{n}": ["report", "--chapter", str(n)] for n in (26, 27, 28, 29, 30, 37)},
    "attend-head": ["attend"], "attend-head-causal": ["attend", "--causal"],
    "attend-layer-causal": ["attend", "LAYER", "--causal"],
    "check-projections": ["check", str(EXAMPLES / "numpy_qkv.py")],
    "check-head": ["check", str(EXAMPLES / "numpy_head.py")],
    "check-rope-mha": ["check", str(EXAMPLES / "numpy_rope_mha.py")],
    "check-failing": ["check", str(EXAMPLES / "wrong_mha_strided_heads.py")],
    "check-not-run": ["check", str(EXAMPLES / "wrong_float32.py")],
    "check-failing-cache": ["check", str(EXAMPLES / "wrong_cache_rope_at_zero.py")],
    "gradcheck": ["gradcheck"],
    "gradcheck-ch30": ["gradcheck", str(ROOT / "qkvcli" / "data"
                                        / "ch30-multi-head-attention.json")],
    "run-ch37-random": ["run", "CH37"],
    "run-ch37-long": ["run", "CH37LONG"],
}
"""Every page the explorer draws, by name: the command that writes it (``LAYER``: the
small layer above, ``CH37``: a random chapter-37 fixture, ``CH37LONG``: one of
:data:`CH37_LONG`'s shape, whose page keeps to its budget by leaving steps out, each
written beside the page)."""

_PAGES: dict[str, Path] = {}


def page_of(name: str, factory: pytest.TempPathFactory) -> Path:
    """The page ``name`` of :data:`PAGES`, written once per test session."""
    if name not in _PAGES:
        folder = factory.mktemp(name)
        layer = folder / "layer.json"
        layer.write_text(json.dumps(LAYER), encoding="utf-8")
        written = {"LAYER": layer, "CH37": ch37_fixture(folder),
                   "CH37LONG": ch37_fixture(folder, 11, CH37_LONG)}
        args = [str(written[arg]) if arg in written else arg for arg in PAGES[name]]
        write_page(folder, *args)
        _PAGES[name] = folder / "page.html"
    return _PAGES[name]

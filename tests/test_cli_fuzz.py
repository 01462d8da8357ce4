"""Fuzzing the CLI: mutated fixtures and random bytes never give a traceback or a strange exit.

Whatever the input, ``qkv run`` and ``qkv validate`` exit with 0, 1 or 2, raise nothing
out of the command, and never print "Traceback". For mutated fixtures, the first
problem ``qkv validate`` lists is the one the single-error path reports.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qkvcli.cli import main
from qkvcli.reading.parse import fixture_problems, parse_fixture
from qkvcli.reading.problems import FixtureError
from tests.hostile_helpers import json_paths

BASE: dict[str, Any] = {
    "chapter": "fuzz",
    "seed": 3,
    "input": [[[1, 2, -1], [0, 1, 2]]],
    "weights": {
        "query": {"name": "q.weight", "values": [[1, 0], [0, 1], [1, -1]]},
        "key": {"shape": [3, 2], "values": [0, 1, 1, 0, -1, 1]},
        "value": [[1, 1], [1, -1], [0, 2]],
    },
    "upstream": {"query": [[[1, 0], [-1, 2]]], "value": [[[2, 1], [0, -0.5]]]},
    "gradcheck": {"step": 1e-6, "tolerance": 2e-6, "samples": 3},
    "expect": {"query": [[[0, 3], [2, -1]]], "loss": 5.0, "tolerance": 0},
}

# Leaves that a person (or a broken generator) might put anywhere.
LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 4), st.integers(),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e308, -0.0, 0.5]),
    st.text(max_size=5), st.sampled_from(["query", "values", "shape", "name", "Q"]),
)
JSON_VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(["values", "shape", "name", "query", "key", "valeu", "npy", "x"]),
            inner, max_size=3,
        ),
    ),
    max_leaves=12,
)


ALL_PATHS = json_paths(BASE)[1:]


@st.composite
def mutated(draw: st.DrawFn) -> Any:
    """BASE with a few locations replaced, deleted, or given an extra key."""
    data = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(ALL_PATHS))
        parent = data
        try:
            for key in path[:-1]:
                parent = parent[key]
            if isinstance(parent, dict) and not isinstance(path[-1], str):
                continue  # a list index into an object an earlier mutation put there: JSON
                # objects have only string keys, so no fixture file can be this
            action = draw(st.sampled_from(["replace", "delete", "extra"]))
            if action == "replace":
                parent[path[-1]] = draw(JSON_VALUES)
            elif action == "delete" and isinstance(parent, dict):
                del parent[path[-1]]
            elif isinstance(parent, dict):
                parent[draw(st.sampled_from(["valeu", "tolerance", "qurey", "x"]))] = 1
        except (KeyError, IndexError, TypeError):
            pass  # an earlier mutation removed or replaced this location
    return data


def _encode(data: Any) -> bytes:
    # allow_nan: NaN and Infinity are what a careless writer produces, and qkv must refuse them.
    return json.dumps(data, allow_nan=True).encode()


def _invoke(tmp_path: Path, args: list[str], content: bytes) -> Any:
    path = tmp_path / "f.json"
    path.write_bytes(content)
    return CliRunner().invoke(main, [*args[:1], str(path), *args[1:]])


def _assert_harmless(result: Any) -> None:
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        assert lines and lines[0].startswith("Error: ")


FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@FUZZ
@given(data=mutated())
def test_mutated_fixtures_are_harmless(tmp_path: Path, data: Any) -> None:
    content = _encode(data)
    for args in (["run", "--samples", "2"], ["validate"]):
        _assert_harmless(_invoke(tmp_path, args, content))


@FUZZ
@given(content=st.binary(max_size=200))
def test_random_bytes_are_harmless(tmp_path: Path, content: bytes) -> None:
    for args in (["run"], ["validate"]):
        _assert_harmless(_invoke(tmp_path, args, content))


@FUZZ
@given(data=mutated(), cut=st.integers(0, 400))
def test_truncated_fixtures_are_harmless(tmp_path: Path, data: Any, cut: int) -> None:
    _assert_harmless(_invoke(tmp_path, ["run"], _encode(data)[:cut]))


@settings(max_examples=150, deadline=None)
@given(data=mutated())
def test_first_collected_problem_is_the_single_error(data: Any) -> None:
    problems = fixture_problems(data)
    try:
        parse_fixture(data)
    except FixtureError as error:
        assert problems, "parse_fixture refused a fixture that fixture_problems accepted"
        assert str(problems[0]) == str(error)
    else:
        assert problems == []


# --- .npy headers, attend fixtures and answers files: no input ends in exit 70 ----------


def _assert_not_internal(result: Any) -> None:
    _assert_harmless(result)
    assert "internal error" not in result.output


HEADER_VALUES = st.one_of(
    st.booleans(), st.integers(-3, 10), st.integers(), st.none(), st.text(max_size=6),
    st.sampled_from(["'<f8'", "'>f8'", "'<i2'", "'|b1'", "'<c16'", "'O'", "'<f2'", "'V8'"]),
    st.lists(st.one_of(st.booleans(), st.integers(-2, 4), st.integers()), max_size=4),
)


def _spell(value: Any) -> str:
    if isinstance(value, list):
        return "(" + "".join(f"{_spell(item)}, " for item in value) + ")"
    if isinstance(value, str) and value.startswith("'"):
        return value
    return repr(value)


@FUZZ
@given(descr=HEADER_VALUES, fortran=HEADER_VALUES, shape=HEADER_VALUES,
       data=st.binary(max_size=64), raw=st.none() | st.text(max_size=40))
def test_npy_headers_are_harmless(
    tmp_path: Path, descr: Any, fortran: Any, shape: Any, data: bytes, raw: str | None
) -> None:
    header = raw if raw is not None else (
        f"{{'descr': {_spell(descr)}, 'fortran_order': {_spell(fortran)}, "
        f"'shape': {_spell(shape)}, }}"
    )
    encoded = header.encode("utf-8", "surrogatepass")
    encoded += b" " * (63 - (10 + len(encoded)) % 64) + b"\n"
    (tmp_path / "x.npy").write_bytes(
        b"\x93NUMPY\x01\x00" + len(encoded).to_bytes(2, "little") + encoded + data
    )
    fixture = copy.deepcopy(BASE)
    fixture["input"] = {"npy": "x.npy"}
    content = _encode(fixture)
    for args in (["run", "--samples", "2"], ["attend", "--samples", "2"], ["validate"]):
        _assert_not_internal(_invoke(tmp_path, args, content))


ATTEND_EXTRAS: dict[str, Any] = {
    "value_width": "independent",
    "weights": {
        "in_proj_weight": [[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 1], [1, 0, 0], [0, 1, 1]],
        "in_proj_bias": [0.5, -0.5, 0, 1, 0, 0],
    },
}
ATTEND_PATHS = json_paths(ATTEND_EXTRAS)[1:]


@FUZZ
@given(data=mutated(), extra=st.booleans(), swaps=st.lists(
    st.tuples(st.sampled_from(ATTEND_PATHS), JSON_VALUES), max_size=2))
def test_attend_fixtures_are_harmless(tmp_path: Path, data: Any, extra: bool,
                                      swaps: list[Any]) -> None:
    if extra and isinstance(data, dict):
        data.update(copy.deepcopy(ATTEND_EXTRAS))
        for path, value in swaps:
            parent = data
            try:
                for key in path[:-1]:
                    parent = parent[key]
                parent[path[-1]] = value
            except (KeyError, IndexError, TypeError):
                pass
    for args in (["attend", "--samples", "2"], ["attend", "--causal", "--samples", "2"]):
        _assert_not_internal(_invoke(tmp_path, args, _encode(data)))


ANSWERS = st.one_of(
    st.binary(max_size=80),
    st.text(max_size=60).map(lambda text: text.encode("utf-8", "surrogatepass")),
    st.lists(st.one_of(JSON_VALUES, st.text(max_size=8)), max_size=11).map(
        lambda items: json.dumps(items).encode()),
    st.dictionaries(st.text(max_size=3), st.one_of(JSON_VALUES, st.text(max_size=8)),
                    max_size=10).map(lambda items: json.dumps(items).encode()),
)


@FUZZ
@given(answers=ANSWERS)
def test_answers_files_are_harmless(tmp_path: Path, answers: bytes) -> None:
    (tmp_path / "answers").write_bytes(answers)
    fixture = tmp_path / "f.json"
    fixture.write_bytes(_encode(BASE))
    result = CliRunner().invoke(main, ["quiz", str(fixture), "--answers",
                                       str(tmp_path / "answers")])
    _assert_not_internal(result)
    assert "\x1b" not in result.output


# --- .safetensors headers: duplicates, absurd offsets and shapes ------------------------

SAFETENSORS_DTYPES = st.sampled_from(["F32", "F64", "F16", "BF16", "I32", "BOOL", "Z9", "", "f32"])
HUGE = st.sampled_from([2**31, 2**62, 2**64 - 1, 2**64, 10**30, -1, -(2**63)])
DIMENSION = st.one_of(st.integers(0, 4), HUGE, st.booleans(), st.none(), st.just(1.5))


@st.composite
def checkpoint_entries(draw: st.DrawFn) -> tuple[str, bytes]:
    """A header written by hand (names may repeat) and the data after it."""
    entries = []
    for _ in range(draw(st.integers(0, 4))):
        # Names as JSON text: "\u0074" is another spelling of "t".
        name = draw(st.sampled_from(['"t"', '"t"', '"u"', '"__metadata__"', '"\\u0074"',
                                     '"x\\u001b"']))
        if draw(st.booleans()):
            body: Any = {
                "dtype": draw(SAFETENSORS_DTYPES),
                "shape": draw(st.lists(DIMENSION, max_size=3)),
                "data_offsets": draw(st.lists(st.one_of(st.integers(0, 16), HUGE), max_size=3)),
            }
        else:
            body = draw(JSON_VALUES)
        entries.append(f"{name}: {json.dumps(body)}")
    header = "{" + ", ".join(entries) + "}"
    if draw(st.booleans()):
        header = header[: draw(st.integers(0, len(header)))]
    return header, draw(st.binary(max_size=24))


@FUZZ
@given(entries=checkpoint_entries(), stated=st.none() | st.one_of(st.integers(0, 64), HUGE))
def test_safetensors_headers_are_harmless(
    tmp_path: Path, entries: tuple[str, bytes], stated: int | None
) -> None:
    header, data = entries
    encoded = header.encode("utf-8", "surrogatepass")
    length = len(encoded) if stated is None else stated % 2**64
    (tmp_path / "c.safetensors").write_bytes(length.to_bytes(8, "little") + encoded + data)
    fixture = {"input": [[[1, 2]]], "weights": {
        "query": {"safetensors": "c.safetensors", "tensor": "t"},
        "key": [[1], [0]], "value": [[1], [0]]}}
    _assert_not_internal(CliRunner().invoke(main, ["inspect", str(tmp_path / "c.safetensors")]))
    _assert_not_internal(_invoke(tmp_path, ["attend", "--samples", "2"], _encode(fixture)))


# --- --command replies with absurd shapes and numbers -----------------------------------

REPLY_NUMBERS = st.one_of(
    st.integers(-3, 3), st.sampled_from([1e308, -1e308, 5e-324, 10**400, -(10**30)]),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=3), st.none(),
    st.booleans(),
)
REPLY_TENSORS = st.one_of(
    st.fixed_dictionaries({
        "shape": st.one_of(st.lists(DIMENSION, max_size=4),
                           st.lists(st.just(1), min_size=33, max_size=100),
                           st.sampled_from([[0, 2**62, 2**62], [0, 10**30], [1, 2, 2]])),
        "values": st.lists(REPLY_NUMBERS, max_size=6),
    }),
    JSON_VALUES,
)
REPLY_PROGRAM = """\
import json, sys
template = json.load(open(sys.argv[1]))
for line in sys.stdin:
    message = json.loads(line)
    if message["op"] == "hello":
        reply = {"id": 0, "version": 1}
    elif message["op"] == "bye":
        print(json.dumps({"id": message["id"]}), flush=True)
        break
    else:
        reply = {"id": message["id"], **template}
    sys.stdout.write(json.dumps(reply) + "\\n")
    sys.stdout.flush()
"""
REPLY_NAMES = ("query", "key", "value", "grad_input", "grad_w_query", "grad_w_key",
               "grad_w_value")


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tensors=st.lists(REPLY_TENSORS, min_size=7, max_size=7))
def test_command_replies_with_absurd_shapes_and_numbers_are_harmless(
    tmp_path: Path, tensors: list[Any]
) -> None:
    import shlex
    import sys

    program = tmp_path / "reply.py"
    program.write_text(REPLY_PROGRAM, encoding="utf-8")
    template = tmp_path / "template.json"
    template.write_text(json.dumps(dict(zip(REPLY_NAMES, tensors, strict=True))))
    command = " ".join(shlex.quote(part) for part in (sys.executable, str(program), str(template)))
    result = CliRunner().invoke(main, ["check", "--command", command, "--random", "1",
                                       "--timeout", "10", "-f", "text"])
    _assert_not_internal(result)
    assert result.exit_code == 1  # the replies are never all right


# Python implementations returning hostile objects: each result is built from a Python
# expression, so the fuzz reaches objects JSON cannot carry (raising dunders, recursion,
# generators, huge or non-finite numbers, wrong lengths and nesting).
HOSTILE_CLASSES = '''
class Raises:
    def __array__(self, *args, **kwargs): raise RuntimeError("no array")
class BadLen(tuple):
    def __len__(self): raise RuntimeError("no len")
class BadAttr:
    def __getattr__(self, name): raise RuntimeError(name)
class Exits:
    def __array__(self, *args, **kwargs): raise SystemExit(0)
class Keyboard:
    def __array__(self, *args, **kwargs): raise KeyboardInterrupt
loop = []
loop.append(loop)
'''
HOSTILE_VALUES = st.sampled_from([
    "x @ wq", "x", "None", "'text'", "b'bytes'", "1e308 * 10", "float('nan')", "-0.0", "[]",
    "[[[]]]", "loop", "Raises()", "BadLen((1, 2, 3))", "BadAttr()", "Exits()", "Keyboard()",
    "(v for v in [x])", "{'shape': [1], 'values': [1]}", "x.astype('float32')", "x[..., :1]",
    "10 ** 400", "object()", "x @ wq + 1e-300",
    "__import__('numpy').zeros((2 ** 20, 2 ** 20), dtype=bool)[:0]",
])


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(HOSTILE_VALUES, min_size=1, max_size=4))
def test_python_implementations_returning_hostile_objects_are_harmless(
    tmp_path: Path, values: list[str]
) -> None:

    results = ", ".join(values)
    implementation = tmp_path / "hostile_impl.py"
    implementation.write_text(HOSTILE_CLASSES + "def forward(x, wq, wk, wv):\n"
                              f"    return ({results},)\n"
                              "def backward(x, wq, wk, wv, gq, gk, gv):\n"
                              f"    return ({results},)\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["check", str(implementation), "--random", "0",
                                       "--timeout", "10", "-f", "text"])
    _assert_not_internal(result)
    assert result.exit_code in (1, 2), result.output  # a failed check, or a clear refusal
    if result.exit_code == 1:
        assert result.stdout.splitlines()[-1].startswith("verdict: FAIL")


CONFIG_KEYS = ["model_type", "num_attention_heads", "n_head", "num_key_value_heads", "head_dim",
               "hidden_size", "rope_theta", "rope_parameters", "rope_scaling",
               "partial_rotary_factor", "sliding_window", "layer_types", "architectures",
               "is_decoder", "alibi", "position_embedding_type"]
CONFIG_VALUES = st.one_of(JSON_VALUES, st.sampled_from(
    ["llama", "gpt2", "mistral", "default", "linear", 2, 4, 8, 16, 1e4, ["LlamaForCausalLM"],
     {"rope_type": "default", "rope_theta": 1e4}, ["full_attention"]]))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(st.sampled_from(CONFIG_KEYS), CONFIG_VALUES, max_size=4),
       dropped=st.sets(st.sampled_from(["num_attention_heads", "num_key_value_heads"])))
def test_mutated_model_configs_are_harmless_and_what_init_writes_attend_reads(
    tmp_path: Path, changes: dict[str, Any], dropped: set[str]
) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    checkpoint = tmp_path / "model.safetensors"
    if not checkpoint.exists():
        rng = np.random.default_rng(1)
        save_file({f"layers.0.self_attn.{name}.weight": rng.normal(size=shape).astype(np.float32)
                   for name, shape in (("q_proj", (16, 16)), ("k_proj", (8, 16)),
                                       ("v_proj", (8, 16)), ("o_proj", (16, 16)))},
                  str(checkpoint))
    config = {"model_type": "llama", "num_attention_heads": 4, "num_key_value_heads": 2}
    config = {key: value for key, value in config.items() if key not in dropped} | changes
    (tmp_path / "config.json").write_bytes(_encode(config))
    result = CliRunner().invoke(main, ["init", "--from-safetensors", str(checkpoint), "--prefix",
                                       "layers.0.self_attn.", "-o", str(tmp_path / "out.json"),
                                       "--force"])
    _assert_harmless(result)
    assert result.exit_code in (0, 2)
    if result.exit_code == 2:
        assert len(result.stderr.splitlines()) == 1, result.stderr
        return
    run = CliRunner().invoke(main, ["attend", str(tmp_path / "out.json"), "--samples", "2"])
    # init never writes a fixture attend refuses (the weights here are finite)
    assert run.exit_code in (0, 1), run.output

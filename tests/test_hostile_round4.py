"""Hostile input, round 4: outputs never replace inputs, signals end every process qkv
started, one snapshot of each input, closed standard streams, unforgeable purity,
batches that keep going, long output names, safetensors offsets, located errors."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .hostile_helpers import BASE, fixture, invoke, refused, write
from .test_hostile_processes import gone, pids

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "implementations"
WRONG = str(EXAMPLES / "wrong_no_value_path.py")
CHAPTER = Path(__file__).resolve().parent.parent / "qkvcli" / "data" / "ch26-qkv-projections.json"


# --- 1. nothing a user owns is overwritten unless named as an output ---------------------


def test_save_failures_never_replaces_the_fixture_it_checks(tmp_path):
    folder = tmp_path / "sf"
    folder.mkdir()
    given = folder / "01-chapter.json"
    shutil.copy(CHAPTER, given)
    before = given.read_bytes()
    result = invoke("check", WRONG, str(given), "--random", "0", "-f", "text",
                    "--save-failures", str(folder))
    refused(result, str(given), "refusing to overwrite a file this command reads")
    assert given.read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["01-chapter.json"]


def test_save_failures_never_replaces_the_implementation_through_a_link(tmp_path):
    folder = tmp_path / "sf"
    folder.mkdir()
    impl = tmp_path / "impl.py"
    shutil.copy(WRONG, impl)
    before = impl.read_bytes()
    (folder / "01-chapter.requests.jsonl").symlink_to(impl)
    result = invoke("check", str(impl), "--random", "0", "-f", "text",
                    "--save-failures", str(folder))
    refused(result, "01-chapter.requests.jsonl", "refusing to overwrite a file this command reads")
    assert impl.read_bytes() == before


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_save_failures_replaces_only_regular_files(tmp_path, kind):
    folder = tmp_path / "sf"
    folder.mkdir()
    place = folder / "01-chapter.json"
    elsewhere = tmp_path / "notes.txt"
    elsewhere.write_text("mine\n")
    if kind == "fifo":
        os.mkfifo(place)
    else:
        place.symlink_to(elsewhere)
    result = invoke("check", WRONG, "--random", "0", "-f", "text", "--save-failures", str(folder))
    refused(result, str(place), "qkv replaces only a regular file there")
    assert elsewhere.read_text() == "mine\n"
    assert place.is_fifo() if kind == "fifo" else place.is_symlink()


def test_an_output_never_replaces_a_tensor_file_the_fixture_read(tmp_path):
    np.save(tmp_path / "x.npy", np.array(BASE["input"], dtype=np.float64))
    path = write(tmp_path / "f.json", fixture(input={"npy": "x.npy"}))
    before = (tmp_path / "x.npy").read_bytes()
    result = invoke("run", str(path), "-f", "text", "-o", str(tmp_path / "x.npy"))
    refused(result, "x.npy", "refusing to overwrite a file this command reads")
    assert (tmp_path / "x.npy").read_bytes() == before
    assert invoke("run", str(path), "-f", "text", "-o", str(tmp_path / "out.txt")).exit_code == 0


# --- 7. temporary names fit wherever the output's name fits -------------------------------


@pytest.mark.parametrize("name", ["o" * 253 + ".t", "é" * 126 + "x"], ids=["ascii", "utf8"])
def test_an_output_name_at_the_limit_is_written(tmp_path, name):
    target = tmp_path / name
    assert len(os.fsencode(name)) <= 255
    result = invoke("run", "-f", "text", "-o", str(target))
    assert result.exit_code == 0, result.output
    assert target.read_text().startswith("chapter=")
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


# --- 2. signals end every process qkv started, then one line and 128 + N ---------------

ROOT = Path(__file__).resolve().parent.parent
SLOW = {  # about ten seconds of `qkv run --mode full` on one core: time to be interrupted
    "input": {"generate": {"seed": 1, "shape": [2, 96, 192]}},
    "weights": {name: {"generate": {"seed": seed, "shape": [192, 192]}}
                for seed, name in enumerate(("query", "key", "value"), 2)},
}


def descendants(root: int) -> set[int]:
    """Every living process below ``root``, from the parent ids in /proc."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents.setdefault(int(fields[1]), []).append(int(entry))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def start_qkv(*args: str) -> subprocess.Popen[str]:
    """A real ``qkv`` in a session of its own (its id is its process group's)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "qkvcli", *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)


def wait_for(condition: Any, what: str, within: float = 120.0) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"no {what} within {within} s")


def finish(qkv: subprocess.Popen[str], started: set[int]) -> tuple[str, str]:
    """qkv's output once it exited; every process it had started must be gone."""
    try:
        out, err = qkv.communicate(timeout=60)
    finally:
        if qkv.poll() is None:
            os.killpg(qkv.pid, signal.SIGKILL)
            qkv.wait()
    survivors = [pid for pid in started if not gone(pid)]
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert not survivors, f"processes {survivors} outlived qkv"
    return out, err


def slow_batch(tmp_path: Path, count: int = 4) -> Path:
    folder = tmp_path / "slow"
    folder.mkdir()
    for index in range(count):
        write(folder / f"{index}.json", SLOW)
    return folder


STOPS = [("SIGINT", "qkv: interrupted", True), ("SIGINT", "qkv: interrupted", False),
         ("SIGTERM", "qkv: stopped by SIGTERM", False),
         ("SIGHUP", "qkv: stopped by SIGHUP", False),
         ("SIGPIPE", "qkv: stopped by SIGPIPE", False)]


@pytest.mark.parametrize(("name", "line", "group"), STOPS,
                         ids=["sigint-group", "sigint", "sigterm", "sighup", "sigpipe"])
def test_a_signal_ends_run_jobs_and_its_workers(tmp_path, name, line, group):
    qkv = start_qkv("run", str(slow_batch(tmp_path)), "--jobs", "2", "--mode", "full")
    workers = wait_for(lambda: len(found := descendants(qkv.pid)) >= 2 and found, "workers")
    signum = getattr(signal, name)
    if group:  # Ctrl-C at a terminal: the whole foreground process group gets it
        os.killpg(qkv.pid, signum)
    else:
        qkv.send_signal(signum)
    out, err = finish(qkv, workers)
    assert qkv.returncode == 128 + signum, err
    assert err.splitlines() == [line]
    assert out == ""


def test_a_killed_worker_is_its_fixtures_row(tmp_path):
    folder = tmp_path / "batch"
    folder.mkdir()
    write(folder / "a.json", BASE)
    write(folder / "b.json", SLOW)
    write(folder / "c.json", BASE)
    qkv = start_qkv("run", str(folder), "--jobs", "2", "--mode", "full", "-f", "text")
    # b.json's worker is the one still computing once a.json's has given its row.
    worker = wait_for(lambda: len(found := descendants(qkv.pid)) == 1 and found
                      and time.sleep(0.3) is None and descendants(qkv.pid) == found and found,
                      "b.json's worker alone")
    os.kill(next(iter(worker)), signal.SIGKILL)
    out, err = finish(qkv, worker)
    assert qkv.returncode == 2, err
    died = "its worker process was killed by SIGKILL before giving a result (out of memory?)"
    row = next(line for line in out.splitlines() if line.startswith(str(folder / "b.json")))
    assert row.split()[1:] == ["-", "ERROR:", *died.split()]
    assert err == f"Error: {folder / 'b.json'}: {died}\n"  # its row, and one line on stderr
    assert "3 fixtures: 2 passed, 0 failed, 1 bad input" in out


def test_sighup_ends_a_python_implementations_process(tmp_path):
    started = tmp_path / "started"
    impl = tmp_path / "slow_impl.py"
    impl.write_text("import os, time\n"
                    "def forward(x, wq, wk, wv):\n"
                    f"    open({str(started)!r}, 'w').write(f'{{os.getpid()}}\\n')\n"
                    "    time.sleep(300)\n")
    qkv = start_qkv("check", str(impl), "--random", "0", "--timeout", "600", "-f", "text")
    child = set(pids(started)) | descendants(qkv.pid)
    qkv.send_signal(signal.SIGHUP)
    out, err = finish(qkv, child)
    assert qkv.returncode == 128 + signal.SIGHUP, err
    assert err == "qkv: stopped by SIGHUP\n" and out == ""


def test_sigterm_ends_a_command_programs_whole_group(tmp_path):
    record = tmp_path / "pids"
    silent = tmp_path / "silent.py"
    silent.write_text(f"import os, time\nopen({str(record) + '.me'!r}, 'w')"
                      ".write(f'{os.getpid()}\\n')\ntime.sleep(300)\n")
    script = (f"sleep 300 & echo $! > {shlex.quote(str(record))}; "
              f"exec {shlex.quote(sys.executable)} {shlex.quote(str(silent))}")
    qkv = start_qkv("check", "--command", f"sh -c {shlex.quote(script)}", "--timeout", "600",
                    "--random", "0", "-f", "text")
    started = set(pids(record) + pids(Path(str(record) + ".me")))
    qkv.send_signal(signal.SIGTERM)
    out, err = finish(qkv, started)
    assert qkv.returncode == 128 + signal.SIGTERM, err
    assert err == "qkv: stopped by SIGTERM\n" and out == ""


def test_a_reader_that_goes_away_still_ends_quietly(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    qkv = subprocess.Popen([sys.executable, "-m", "qkvcli", "report", "-f", "json", "--full"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert qkv.stdout is not None and qkv.stderr is not None
    qkv.stdout.read(10)
    qkv.stdout.close()  # as `qkv report | head -c 10` does
    err = qkv.stderr.read()
    assert qkv.wait(timeout=60) == 0, err
    assert err == b""


# --- 6. batches that keep going -------------------------------------------------------------


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_layer_fixture_in_a_batch_is_its_own_row(tmp_path, jobs):
    write(tmp_path / "a.json", BASE)
    write(tmp_path / "b.json", {"heads": 2, "input": [[[1.0, 2.0]]]})
    write(tmp_path / "c.json", BASE)
    result = invoke("run", str(tmp_path), "--jobs", jobs)
    assert result.exit_code == 2, result.output
    rows = result.stdout.splitlines()
    assert [row.split()[0] for row in rows[1:4]] == [str(tmp_path / f"{n}.json") for n in "abc"]
    layer = next(row for row in rows if row.startswith(str(tmp_path / "b.json")))
    assert layer.split(None, 2)[1:] == ["-", "ERROR: $.heads: a multi-head layer fixture; run it "
                                        "with qkv attend"]
    assert "3 fixtures: 2 passed, 0 failed, 1 bad input" in result.stdout
    assert result.stderr == (f"Error: {tmp_path / 'b.json'}: $.heads: a multi-head layer fixture; "
                             "run it with qkv attend\n")  # its row, and one line on stderr


# --- 3. one snapshot of each input ------------------------------------------------------------


@pytest.mark.parametrize("change", ["rewrite", "truncate"])
def test_an_npy_changed_while_qkv_checks_gives_one_reading(tmp_path, change):
    x = np.arange(1.0, 97.0).reshape(2, 8, 6) / 7.0
    np.save(tmp_path / "x.npy", x)
    weights = {name: (np.arange(24.0).reshape(6, 4) / (5.0 + i)).tolist()
               for i, name in enumerate(("query", "key", "value"))}
    path = write(tmp_path / "f.json", {"input": {"npy": "x.npy"}, "weights": weights})
    spoil = ("handle.seek(-8 * 48, 2); handle.write(bytes(8 * 48))" if change == "rewrite"
             else "handle.truncate(0)")
    impl = tmp_path / "changing.py"
    impl.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(EXAMPLES)!r})\n"
        "import numpy_qkv\n"
        "done = []\n"
        "def forward(x, w_query, w_key, w_value):\n"
        "    if not done:\n"
        "        done.append(1)\n"
        f"        with open({str(tmp_path / 'x.npy')!r}, 'r+b') as handle:\n"
        f"            {spoil}\n"
        "    return numpy_qkv.forward(x, w_query, w_key, w_value)\n"
        "backward = numpy_qkv.backward\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "qkvcli", "check", str(impl), str(path),
                           "--random", "0", "-f", "text"], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    assert done.stdout.splitlines()[-1].startswith("verdict: PASS")


def test_a_loaded_npy_is_a_copy_not_a_view_of_the_file(tmp_path):
    from qkvcli.reading.sources import load_npy

    x = np.arange(12.0).reshape(1, 3, 4)
    np.save(tmp_path / "x.npy", x)
    loaded = load_npy("x.npy", "$.input.npy", tmp_path, 1 << 20)
    with open(tmp_path / "x.npy", "r+b") as handle:
        handle.seek(-8 * 12, 2)
        handle.write(bytes(8 * 12))
    assert loaded.tobytes() == x.tobytes()
    empty = np.zeros((0, 3), dtype=np.float64)
    np.save(tmp_path / "e.npy", empty)
    assert load_npy("e.npy", "$.input.npy", tmp_path, 1 << 20).shape == (0, 3)


# --- 4. closed standard streams -----------------------------------------------------------


def closed(redirect: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``qkv ARGS`` run by a shell with ``redirect`` (``<&-``, ``>&-``) closing a stream;
    stderr is kept in a file (it may be the stream closed)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = " ".join(shlex.quote(a) for a in (sys.executable, "-m", "qkvcli", *args))
    return subprocess.run(["sh", "-c", f"exec {command} {redirect}"], capture_output=True,
                          text=True, env=env, timeout=120, check=False)


@pytest.mark.parametrize(("redirect", "args", "line"), [
    ("<&-", ["quiz"], "Error: standard input is closed"),
    (">&-", ["run", "-f", "text"],
     "Error: standard output is closed (-o FILE writes the output to a file)"),
    (">&-", ["run", "-f", "json"],
     "Error: standard output is closed (-o FILE writes the output to a file)"),
    (">&-", ["check", str(EXAMPLES / "numpy_qkv.py"), "--random", "0"],
     "Error: standard output is closed (-o FILE writes the output to a file)"),
], ids=["quiz-stdin", "run-text-stdout", "run-json-stdout", "check-stdout"])
def test_a_closed_standard_stream_is_one_line_and_exit_2(redirect, args, line):
    done = closed(redirect, *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [line]


def test_closed_stdout_and_stderr_exit_2_quietly():
    done = closed(">&- 2>&-", "run", "-f", "text")
    assert done.returncode == 2
    assert done.stderr == "" and done.stdout == ""


def test_a_closed_stream_no_command_needs_changes_nothing(tmp_path):
    out = tmp_path / "report.txt"
    done = closed("<&- >&-", "run", "-f", "text", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"qkv: wrote {out}\n"
    assert out.read_text().startswith("chapter=")


# --- 5. purity that cannot be forged from inside the implementation's process -------------


FORGERIES = {
    "main-changes": ("import __main__\n"
                     "__main__._changes = lambda *args, **kwargs: []\n"),
    "diagnose": ("import qkvcli.check.diagnose as diagnose\n"
                 "diagnose.first_difference = lambda *args, **kwargs: None\n"),
    "numpy-copy": ("import numpy\n"
                   "_array = numpy.array\n"
                   "numpy.array = lambda value, *a, **k: value if k.get('copy') else "
                   "_array(value, *a, **k)\n"),
}


@pytest.mark.parametrize("forgery", FORGERIES.values(), ids=FORGERIES.keys())
def test_a_mutating_forward_fails_purity_whatever_it_patches(tmp_path, forgery):
    impl = tmp_path / "forger.py"
    impl.write_text(forgery + "def forward(x, w_query, w_key, w_value):\n"
                    "    query, key, value = x @ w_query, x @ w_key, x @ w_value\n"
                    "    x *= 2\n"
                    "    return query, key, value\n")
    result = invoke("check", str(impl), "--random", "0", "-f", "json")
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    purity = next(c for c in document["checks"] if c["name"] == "purity")
    assert purity["passed"] is False, purity
    changed = [f for f in document["failures"] if f["check"] == "purity"]
    assert changed and changed[0]["coordinate"].startswith("x[")


def test_a_pure_forward_passes_purity_over_shared_memory(tmp_path):
    result = invoke("check", str(EXAMPLES / "numpy_qkv.py"), "--random", "2", "-f", "json")
    assert result.exit_code == 0, result.output
    purity = next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "purity")
    assert purity["passed"] is True and purity["outcome"] == "passed"


# --- 8. safetensors offsets: contiguous, in order, covering the data ------------------------


def checkpoint(path: Path, offsets: dict[str, list[int]], data_bytes: int) -> Path:
    """A hand-made checkpoint: F64 tensors of shape [3,2] at ``offsets``, ``data_bytes`` of data."""
    header = json.dumps({name: {"dtype": "F64", "shape": [3, 2] if end - begin == 48 else
                                [(end - begin) // 8], "data_offsets": [begin, end]}
                         for name, (begin, end) in offsets.items()}).encode()
    data = np.arange(data_bytes // 8, dtype="<f8").tobytes()
    path.write_bytes(len(header).to_bytes(8, "little") + header + data)
    return path


LAYOUTS = {
    "overlap": ({"wq": [0, 48], "b": [8, 56]}, 56,
                "tensor b: data_offsets [8, 56] overlap those of tensor wq, [0, 48]"),
    "hole": ({"wq": [0, 48], "b": [56, 104]}, 104,
             "bytes 48 to 56 of the data, between tensors wq and b, belong to no tensor"),
    "leading": ({"wq": [8, 56]}, 56, "bytes 0 to 8 of the data, before tensor wq, belong to "
                "no tensor"),
    "trailing": ({"wq": [0, 48]}, 56, "bytes 48 to 56 of the data, after tensor wq, belong to "
                 "no tensor"),
}


@pytest.mark.parametrize(("offsets", "size", "message"), LAYOUTS.values(), ids=LAYOUTS.keys())
@pytest.mark.parametrize("command", ["inspect", "run", "validate", "attend"])
def test_safetensors_offsets_that_do_not_tile_the_data_are_refused(tmp_path, offsets, size,
                                                                   message, command):
    path = checkpoint(tmp_path / "c.safetensors", offsets, size)
    if command == "inspect":
        result = invoke("inspect", str(path))
    else:
        data = fixture()
        data["weights"]["query"] = {"safetensors": "c.safetensors", "tensor": "wq"}
        result = invoke(command, str(write(tmp_path / "f.json", data)))
    line = refused(result, "c.safetensors", message, "the format forbids")
    assert "Traceback" not in result.output
    if command != "inspect":
        assert "$.weights.query" in line


def test_safetensors_offsets_in_any_header_order_are_taken_in_data_order(tmp_path):
    path = checkpoint(tmp_path / "c.safetensors", {"b": [48, 96], "wq": [0, 48]}, 96)
    data = fixture()
    data["weights"]["query"] = {"safetensors": "c.safetensors", "tensor": "wq"}
    assert invoke("inspect", str(path)).exit_code == 0
    assert invoke("validate", str(write(tmp_path / "f.json", data))).exit_code == 0


def test_init_refuses_a_checkpoint_whose_offsets_overlap(tmp_path):
    path = checkpoint(tmp_path / "c.safetensors", {"wq": [0, 48], "b": [8, 56]}, 56)
    result = invoke("init", "--from-safetensors", str(path), "-o", str(tmp_path / "f.json"))
    refused(result, "c.safetensors", "overlap", "the format forbids")
    assert not (tmp_path / "f.json").exists()


# --- 9. a .npy problem names its file and its JSON location --------------------------------


NPY_PROBLEMS = {
    "float32-1e300": (lambda: np.full((3, 2), 1e300).astype(np.float32),
                      "value at flat index 0 is not finite (inf)"),
    "nan": (lambda: np.full((3, 2), np.nan), "value at flat index 0 is not finite (nan)"),
    "object": (lambda: np.array([1, "a"], dtype=object), "object arrays (pickles) are refused"),
    "complex": (lambda: np.ones((3, 2), dtype=np.complex128), "dtype complex128 is not supported"),
}


@pytest.mark.parametrize("command", [["run"], ["attend"], ["validate"], ["gradcheck"], ["quiz"],
                                     ["check", str(EXAMPLES / "numpy_qkv.py")]],
                         ids=["run", "attend", "validate", "gradcheck", "quiz", "check"])
@pytest.mark.parametrize(("make", "problem"), NPY_PROBLEMS.values(), ids=NPY_PROBLEMS.keys())
def test_an_npy_problem_names_the_file_and_the_json_location(tmp_path, command, make, problem):
    with np.errstate(over="ignore"):
        np.save(tmp_path / "w.npy", make(), allow_pickle=True)
    data = fixture()
    data["weights"]["key"] = {"npy": "w.npy"}
    path = write(tmp_path / "f.json", data)
    line = refused(invoke(*command, str(path), stdin=b""), f"{path}: $.weights.key.npy: w.npy: ",
                   problem)
    assert line.startswith(f"Error: {path}: ")


# --- the strict reader: an integer beyond float64 is refused where it stands ---------------


HUGE = "1" + "0" * 400


@pytest.mark.parametrize(("command", "text", "where"), [
    (["attend"], '{"heads": 1, "rope": {"theta": HUGE}}', "$.rope.theta"),
    (["validate", "--attend"], '{"heads": 1, "scale": HUGE}', "$.scale"),
    (["run"], json.dumps(BASE).replace('"query": [[1, 0]', '"query": [[1, HUGE]'),
     "$.weights.query[0][1]"),
    (["check", str(EXAMPLES / "numpy_qkv.py")], '{"seed": HUGE}', "$.seed"),
], ids=["attend-rope-theta", "validate-scale", "run-weight", "check-seed"])
def test_an_integer_beyond_float64_is_refused_at_its_json_path(tmp_path, command, text, where):
    path = write(tmp_path / "f.json", text.replace("HUGE", HUGE))
    line = refused(invoke(*command, str(path)), f"{path}: {where}: ")
    assert line == f"Error: {path}: {where}: number is too large for binary64"


def test_init_refuses_a_config_with_an_integer_beyond_float64(tmp_path):
    names = [f"model.layers.0.self_attn.{n}_proj.weight" for n in "qkvo"]
    header = json.dumps({name: {"dtype": "F64", "shape": [4, 4],
                                "data_offsets": [128 * i, 128 * i + 128]}
                         for i, name in enumerate(names)}).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(4 * 128))
    (tmp_path / "config.json").write_text('{"model_type": "llama", "rope_theta": HUGE}'.replace("HUGE", HUGE))
    result = invoke("init", "--from-safetensors", str(path), "--prefix",
                    "model.layers.0.self_attn.", "-o", str(tmp_path / "f.json"))
    refused(result, "config.json: not a JSON config: $.rope_theta: number is too large for "
            "binary64")


def test_digits_that_are_no_huge_integer_are_read():
    from qkvcli.reading.json_values import parse_json_text

    largest = str(int(sys.float_info.max))  # 309 digits, a finite float64
    data = parse_json_text(f'{{"name": "{HUGE}", "x": 0.{HUGE}, "y": {largest}, '
                           f'"z": 1e{"0" * 300}}}')
    assert data["name"] == HUGE and data["y"] == int(largest) and data["z"] == 1.0
    assert float(data["y"]) == sys.float_info.max


def test_a_fifo_reader_that_goes_away_is_a_write_error_not_a_stop(tmp_path):
    big = write(tmp_path / "big.json", {
        "input": {"generate": {"seed": 1, "shape": [1, 64, 64]}},
        "weights": {name: {"generate": {"seed": seed, "shape": [64, 64]}}
                    for seed, name in enumerate(("query", "key", "value"), 2)}})
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    qkv = start_qkv("report", str(big), "-f", "json", "--full", "-o", str(fifo))
    with open(fifo, "rb") as reader:
        assert reader.read(10)
    out, err = finish(qkv, set())
    assert out == ""
    assert qkv.returncode == 2, err
    assert err.splitlines() == [f"Error: -o/--output {fifo}: cannot write (Broken pipe)"]


def test_an_implementation_that_cuts_the_shared_memory_short_fails_purity(tmp_path):
    impl = tmp_path / "cutter.py"
    impl.write_text("import os\n"
                    "def forward(x, w_query, w_key, w_value):\n"
                    "    result = x @ w_query, x @ w_key, x @ w_value\n"
                    "    os.ftruncate(_arena(), 0)\n"
                    "    return result\n"
                    "def _arena():\n"
                    "    for name in os.listdir('/proc/self/fd'):\n"
                    "        if 'qkv-arguments' in os.readlink(f'/proc/self/fd/{name}'):\n"
                    "            return int(name)\n"
                    "    raise RuntimeError('no arena')\n")
    result = invoke("check", str(impl), "--random", "0", "-f", "json")
    assert result.exit_code == 1, result.output
    assert "internal error" not in result.output
    purity = next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "purity")
    assert purity["passed"] is False

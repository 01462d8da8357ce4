"""The one reader (qkvcli.reading.files) and the one way to load a fixture (load.py)."""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import numpy as np
import pytest

from qkvcli.check.chapter26 import projections_of
from qkvcli.core.errors import QkvError
from qkvcli.reading.files import InputFileError, confined, read_limited
from qkvcli.reading.load import bundled_fixture_text, load_fixture
from qkvcli.reading.problems import FixtureError

CHAPTER = json.loads(bundled_fixture_text())


def test_errors_are_qkv_errors_with_their_fields() -> None:
    error = InputFileError("f.json", "no such file")
    assert isinstance(error, QkvError)
    assert (error.path, error.problem, str(error)) == ("f.json", "no such file", "f.json: no such file")
    fixture_error = FixtureError("$.seed", "bad")
    assert isinstance(fixture_error, QkvError)
    assert (str(fixture_error), str(FixtureError("", "whole file"))) == ("$.seed: bad", "whole file")
    assert fixture_error == FixtureError("$.seed", "bad")


def test_read_limited_reads_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"12345")
    assert read_limited(tmp_path / "f", 5) == b"12345"
    assert read_limited(str(tmp_path / "f"), 5) == b"12345"


def test_read_limited_refuses_a_file_over_the_limit(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"123456")
    with pytest.raises(InputFileError) as caught:
        read_limited(tmp_path / "f", 5, "golden")
    assert caught.value.problem == "file is 6 bytes; goldens are limited to 5"


def test_read_limited_does_not_trust_the_reported_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "f").write_bytes(b"x" * 100)
    real_fstat = os.fstat

    class Small:
        def __init__(self, result: os.stat_result) -> None:
            self.st_mode = result.st_mode
            self.st_size = 0  # as /proc files and some devices report

    monkeypatch.setattr(os, "fstat", lambda fd: Small(real_fstat(fd)))
    with pytest.raises(InputFileError) as caught:
        read_limited(tmp_path / "f", 10)
    assert caught.value.problem == "file is more than 10 bytes; fixtures are limited to 10"


def test_missing_and_directory(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match=r"no such file$"):
        read_limited(tmp_path / "nope", 10)
    with pytest.raises(InputFileError) as caught:
        read_limited(tmp_path, 10)
    assert caught.value.problem == "is a directory, not a fixture file"


def _refused_without_hanging(path: Path, what: str = "fixture") -> InputFileError:
    """Run the read in a thread, so a regression (a blocking open) fails instead of hanging."""
    outcome: list[BaseException | bytes] = []
    thread = threading.Thread(target=lambda: outcome.append(_attempt(path, what)), daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), f"reading {path} blocked"
    assert isinstance(outcome[0], InputFileError), outcome
    return outcome[0]


def _attempt(path: Path, what: str) -> BaseException | bytes:
    try:
        return read_limited(path, 100, what)
    except BaseException as error:  # handed to the test thread
        return error


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.json")
    assert _refused_without_hanging(tmp_path / "pipe.json").problem == (
        "is a FIFO, not a fixture file"
    )


@pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="no Unix sockets here")
def test_a_socket_and_a_device_are_refused(tmp_path: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(tmp_path / "s"))
        assert _refused_without_hanging(tmp_path / "s", "answer").problem == (
            "is a socket, not an answer file"
        )
    finally:
        server.close()
    if os.path.exists("/dev/null"):
        assert _refused_without_hanging(Path("/dev/null")).problem == (
            "is a character device, not a fixture file"
        )


# --- confinement --------------------------------------------------------------------------


def test_confined_resolves_inside_the_base(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.npy").write_bytes(b"")
    assert confined(tmp_path, "sub/a.npy", "$.x") == (tmp_path / "sub" / "a.npy").resolve()
    assert confined(str(tmp_path), "sub/a.npy", "$.x") == (tmp_path / "sub" / "a.npy").resolve()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("", "expected a non-empty relative path string"),
        (3, "expected a non-empty relative path string"),
        ("a\0b", "a path with a NUL byte is refused"),
        ("/etc/passwd", "absolute path /etc/passwd refused; give a path relative to the "
                        "fixture's directory"),
        ("../x.npy", "../x.npy: '..' is refused; give a path inside the fixture's directory"),
        ("a/../b", "a/../b: '..' is refused; give a path inside the fixture's directory"),
        ("gone.npy", "no such file: gone.npy"),
    ],
    ids=["empty", "number", "nul", "absolute", "parent", "inner-parent", "missing"],
)
def test_confined_refuses(tmp_path: Path, raw: object, message: str) -> None:
    with pytest.raises(FixtureError) as caught:
        confined(tmp_path, raw, "$.input.npy")
    assert (caught.value.location, caught.value.message) == ("$.input.npy", message)


def test_a_symlink_leading_out_is_refused(tmp_path: Path) -> None:
    inside = tmp_path / "in"
    inside.mkdir()
    (tmp_path / "secret.npy").write_bytes(b"")
    os.symlink(tmp_path / "secret.npy", inside / "link.npy")
    os.symlink(tmp_path, inside / "up")
    for raw in ("link.npy", "up/secret.npy"):
        with pytest.raises(FixtureError, match="resolves outside the fixture's directory"):
            confined(inside, raw, "$.input.npy")


# --- load_fixture -------------------------------------------------------------------------


def _write(directory: Path, document: dict[str, object], name: str = "f.json") -> Path:
    path = directory / name
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_load_fixture_takes_a_str_or_a_path(tmp_path: Path) -> None:
    path = _write(tmp_path, CHAPTER)
    from_str, from_path = load_fixture(str(path)), load_fixture(path)
    assert from_str.chapter == from_path.chapter == CHAPTER["chapter"]
    assert np.array_equal(from_str.input, from_path.input)
    unnamed = {key: value for key, value in CHAPTER.items() if key != "chapter"}
    assert load_fixture(str(_write(tmp_path, unnamed, "mine.v2.json"))).chapter == "mine.v2"


def test_the_public_load_fixture_is_this_one() -> None:
    import qkvcli

    assert qkvcli.load_fixture is load_fixture


def test_load_fixture_refuses_a_directory_and_a_fifo(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="is a directory, not a fixture file"):
        load_fixture(str(tmp_path))
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "pipe.json")
        with pytest.raises(InputFileError, match="is a FIFO, not a fixture file"):
            load_fixture(tmp_path / "pipe.json")


def test_load_fixture_byte_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import qkvcli.reading.limits

    path = _write(tmp_path, CHAPTER)
    monkeypatch.setattr(qkvcli.reading.limits, "MAX_FILE_BYTES", 50)
    with pytest.raises(InputFileError) as caught:
        load_fixture(path)
    assert caught.value.problem == (
        f"file is {path.stat().st_size} bytes; fixtures are limited to 50"
    )


def test_expect_npy_resolves_against_the_fixture_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixture_dir = tmp_path / "fixture"
    fixture_dir.mkdir()
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    chapter = load_fixture()
    query = np.asarray(projections_of(chapter).forward(chapter.input).query)
    np.save(fixture_dir / "query.npy", query)
    np.save(elsewhere / "query.npy", query + 1)  # a decoy in the working directory
    document = dict(CHAPTER, expect={"query": {"npy": "query.npy"}})
    path = _write(fixture_dir, document)
    monkeypatch.chdir(elsewhere)
    fixture = load_fixture(str(path))
    assert fixture.expect is not None
    assert np.array_equal(dict(fixture.expect.tensors)["query"], query)


def test_expect_npy_may_not_leave_the_fixture_directory(tmp_path: Path) -> None:
    inside = tmp_path / "in"
    inside.mkdir()
    np.save(tmp_path / "outside.npy", np.ones(3))
    os.symlink(tmp_path / "outside.npy", inside / "link.npy")
    path = _write(inside, dict(CHAPTER, expect={"query": {"npy": "link.npy"}}))
    with pytest.raises(FixtureError) as caught:
        load_fixture(path)
    assert str(caught.value) == (
        "$.expect.query.npy: link.npy resolves outside the fixture's directory; refused"
    )


def test_attend_npy_resolves_against_the_fixture_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from qkvcli.attention.fixture import load_attend_fixture

    fixture_dir = tmp_path / "fixture"
    fixture_dir.mkdir()
    x = np.asarray(CHAPTER["input"], dtype=np.float64)
    np.save(fixture_dir / "x.npy", x)
    path = _write(fixture_dir, dict(CHAPTER, input={"npy": "x.npy"}))
    monkeypatch.chdir(tmp_path)
    assert np.array_equal(load_attend_fixture(path).input, x)


def test_a_npy_fifo_is_refused(tmp_path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    os.mkfifo(tmp_path / "x.npy")
    path = _write(tmp_path, dict(CHAPTER, input={"npy": "x.npy"}))
    with pytest.raises(FixtureError) as caught:
        load_fixture(path)
    assert str(caught.value) == "$.input.npy: x.npy: is a FIFO, not a .npy file"


@pytest.mark.parametrize("expected", [0, 5, 10, 11, 1000])
@pytest.mark.parametrize("size", [0, 10, 11, 3000])
def test_read_at_most_stops_one_byte_past_the_limit(size: int, expected: int) -> None:
    import io

    from qkvcli.reading import files

    data = bytes(range(256)) * (size // 256 + 1)
    data = data[:size]
    got = files.read_at_most(io.BytesIO(data), 10, expected=expected)
    assert got == data[:11]  # a wrong expected size never changes what is read


def test_small_fixture_read_does_not_reserve_the_limit(tmp_path: Path) -> None:
    import tracemalloc

    from qkvcli.reading.files import read_limited

    path = tmp_path / "small.json"
    path.write_bytes(b"{}" * 100)
    tracemalloc.start()
    try:
        data = read_limited(path, 256 * 1024 * 1024)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert data == b"{}" * 100
    assert peak < 1024 * 1024  # a single read(limit + 1) reserved all 256 MiB

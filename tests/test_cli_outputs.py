"""Every output option of every command refuses a path it cannot write in one line.

The line names the option, the path and why (``Error: --html adir: is a directory, not a
file to write``), the exit status is 2, nothing is written and no usage block is shown;
click's usage block stays for real usage errors. The null device is a sink: any number
of outputs may name it.
"""

from __future__ import annotations

import os
import re
import socket
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from qkvcli.cli import main

ROOT = Path(__file__).resolve().parent.parent
IMPL = str(ROOT / "examples" / "implementations" / "numpy_qkv.py")
CHAPTER = str(ROOT / "qkvcli" / "data" / "ch26-qkv-projections.json")
OUT = "-o/--output"

# (command line before the option, the option, how the error line names it)
OPTIONS = [
    *[(["run", "--chapter", "26"], option, named) for option, named in (
        ("-o", OUT), ("--html", "--html"), ("--export-html", "--export-html"),
        ("--export-svg", "--export-svg"))],
    (["run", CHAPTER], "--junit", "--junit"),
    *[(["report"], option, named) for option, named in (
        ("-o", OUT), ("--html", "--html"), ("--export-svg", "--export-svg"))],
    *[(["gradcheck"], option, named) for option, named in (
        ("-o", OUT), ("--html", "--html"), ("--export-html", "--export-html"))],
    *[(["attend"], option, named) for option, named in (
        ("-o", OUT), ("--html", "--html"), ("--export-svg", "--export-svg"))],
    *[(["variance"], option, named) for option, named in (
        ("-o", OUT), ("--export-html", "--export-html"))],
    *[(["check", IMPL, "--random", "0"], option, named) for option, named in (
        ("-o", OUT), ("--html", "--html"), ("--junit", "--junit"),
        ("--export-svg", "--export-svg"))],
    (["init"], "-o", OUT),
]
IDS = [f"{args[0]}{option}" for args, option, _ in OPTIONS]


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def one_line(result: Result, line: str) -> None:
    """Exit 2, nothing on stdout, exactly ``line`` on stderr (no usage block)."""
    assert (result.exit_code, result.stdout) == (2, ""), result.output
    assert result.stderr == f"Error: {line}\n"


def entries(folder: Path) -> list[str]:
    return sorted(os.fspath(p.relative_to(folder)) for p in folder.rglob("*"))


def make_fifo(path: Path) -> Path:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    os.mkfifo(path)
    return path


CASES: list[tuple[str, Callable[[Path], Path], Callable[[Path], str]]] = [
    ("directory", lambda tmp: tmp / "adir", lambda path: "is a directory, not a file to write"),
    ("missing-directory", lambda tmp: tmp / "nodir" / "x.txt",
     lambda path: f"no such directory {path.parent}"),
    ("file-as-directory", lambda tmp: tmp / "afile" / "x.txt",
     lambda path: f"{path.parent} is not a directory"),
    ("fifo-without-reader", lambda tmp: make_fifo(tmp / "fifo"),
     lambda path: "a FIFO with no reader; start the reader first"),
]


@pytest.mark.parametrize(("case", "place", "why"), CASES, ids=[case[0] for case in CASES])
@pytest.mark.parametrize(("args", "option", "named"), OPTIONS, ids=IDS)
def test_a_bad_output_path_is_one_line_naming_the_option(
        tmp_path: Path, args: list[str], option: str, named: str, case: str,
        place: Callable[[Path], Path], why: Callable[[Path], str]) -> None:
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("mine\n")
    path = place(tmp_path)
    before = entries(tmp_path)
    result = invoke(*args, option, str(path))
    one_line(result, f"{named} {path}: {why(path)}")
    assert entries(tmp_path) == before
    assert (tmp_path / "afile").read_text() == "mine\n"


def test_a_bad_output_beside_a_good_one_writes_neither(tmp_path: Path) -> None:
    fifo = make_fifo(tmp_path / "fifo")
    result = invoke("run", "--chapter", "27", "-o", str(tmp_path / "r.txt"), "--html", str(fifo))
    one_line(result, f"--html {fifo}: a FIFO with no reader; start the reader first")
    assert entries(tmp_path) == ["fifo"]


def test_a_fifo_with_a_reader_gets_the_whole_report(tmp_path: Path) -> None:
    fifo = make_fifo(tmp_path / "fifo")
    expected = invoke("report", "-f", "text").stdout.encode()
    assert len(expected) < 16384  # fits a pipe's buffer: read after qkv is done, no thread
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # the reader is there before qkv
    try:
        result = invoke("report", "-f", "text", "-o", str(fifo))
        os.set_blocking(reader, True)
        received = b""
        while chunk := os.read(reader, 65536):  # qkv closed its end: the last read is b""
            received += chunk
    finally:
        os.close(reader)
    assert result.exit_code == 0, result.output
    assert received == expected


def test_a_socket_is_not_an_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(socket, "AF_UNIX"):
        pytest.skip("no Unix sockets here")
    monkeypatch.chdir(tmp_path)  # a short relative name: socket paths are limited to ~100 bytes
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("sock")
        result = invoke("report", "--html", "sock")
    one_line(result, "--html sock: is a socket; qkv writes only a file, a terminal, a FIFO "
             "or the null device")


def test_a_block_device_is_not_an_output(tmp_path: Path) -> None:
    device = tmp_path / "disk"
    try:
        os.mknod(device, stat.S_IFBLK | 0o600, os.makedev(7, 0))
    except (OSError, AttributeError):
        pytest.skip("cannot make a block device here")
    result = invoke("report", "-o", str(device))
    one_line(result, f"{OUT} {device}: is a block device; qkv writes only a file, a terminal, "
             "a FIFO or the null device")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root may write in any directory")
def test_a_directory_without_write_permission_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        result = invoke("run", "--chapter", "26", "--html", str(locked / "p.html"))
    finally:
        locked.chmod(0o755)
    one_line(result, f"--html {locked / 'p.html'}: cannot write in {locked} (permission denied)")
    assert entries(locked) == []


def test_a_read_only_file_system_is_refused(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Root may write anywhere but on a read-only mount; with none at hand, the mount's
    flag is stood in for (``os.statvfs``'s ``ST_RDONLY``, which it reads)."""
    import qkvcli.cli.io as io

    if not hasattr(os, "ST_RDONLY"):
        pytest.skip("no statvfs flags here")
    real = os.statvfs

    class ReadOnly:
        def __init__(self, path: object) -> None:
            self.f_flag = real(path).f_flag | os.ST_RDONLY  # type: ignore[arg-type]

    monkeypatch.setattr(io.os, "statvfs", ReadOnly)
    result = invoke("report", "--export-svg", str(tmp_path / "f.svg"))
    one_line(result, f"--export-svg {tmp_path / 'f.svg'}: cannot write in {tmp_path} "
             "(read-only file system)")
    assert entries(tmp_path) == []


def test_save_failures_names_its_option_too(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("mine\n")
    for path, why in ((tmp_path / "afile", "is not a directory"),
                      (tmp_path / "nodir" / "sf", f"no such directory {tmp_path / 'nodir'}")):
        result = invoke("check", IMPL, "--random", "0", "--save-failures", str(path))
        one_line(result, f"--save-failures {path}: {why}")
    assert entries(tmp_path) == ["afile"]


@pytest.mark.parametrize("args", [["run", "--no-such-option"], ["report", "a", "b"],
                                  ["check"], ["run", "--format", "nope"]],
                         ids=["unknown-option", "extra-argument", "missing-impl", "bad-choice"])
def test_real_usage_errors_keep_clicks_usage_block(args: list[str]) -> None:
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stderr.startswith("Usage: ")
    assert "Try '" in result.stderr and "--help' for help." in result.stderr


NULL = os.devnull if os.path.exists(os.devnull) and not os.path.isfile(os.devnull) else None


@pytest.mark.skipif(NULL is None, reason="no null device")
@pytest.mark.parametrize("args", [
    ["run", "--chapter", "26", "-o", str(NULL), "--html", str(NULL)],
    ["run", "--chapter", "27", "-f", "rich", "-o", str(NULL), "--export-svg", str(NULL),
     "--export-html", str(NULL), "--html", str(NULL)],
    ["check", IMPL, "--random", "0", "-o", str(NULL), "--junit", str(NULL)],
], ids=["run-o-html", "run-every-output", "check-o-junit"])
def test_the_null_device_may_take_every_output(tmp_path: Path, args: list[str]) -> None:
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert set(result.stderr.splitlines()) == {f"qkv: wrote {NULL}"}


def test_a_real_file_named_twice_is_still_refused(tmp_path: Path) -> None:
    out = tmp_path / "r.txt"
    result = invoke("run", "--chapter", "26", "-o", str(out), "--html", str(out))
    one_line(result, f"--html {out}: named twice as an output (also by {OUT})")
    assert entries(tmp_path) == []


def test_a_name_no_system_can_open_is_one_line_naming_the_option() -> None:
    long = "n" * 300
    result = invoke("report", "--html", long)
    assert (result.exit_code, result.stdout) == (2, ""), result.output
    assert re.fullmatch(r"Error: --html n+…: a file name is longer than this system's limit "
                        r"of \d+ bytes\n", result.stderr), result.stderr


def test_help_still_calls_an_output_file_and_a_folder_dir() -> None:
    text = invoke("check", "--help").stdout
    for usage in ("-o, --output FILE", "--junit FILE", "--html FILE", "--export-svg FILE",
                  "--save-failures DIR"):
        assert usage in text

"""The one way any command reads a fixture: :func:`load_fixture`.

A fixture file goes through :func:`~qkvcli.reading.files.read_limited` (regular files
only, at most ``MAX_FILE_BYTES``), strict UTF-8 and strict JSON, then
:func:`~qkvcli.reading.parse.parse_fixture` with ``npy`` paths confined to the file's
directory.
"""

from __future__ import annotations

import os
from typing import Any

from qkvcli.reading import limits
from qkvcli.reading.files import STDIN, StrPath, read_limited
from qkvcli.reading.fixture import Fixture
from qkvcli.reading.json_values import parse_json_text
from qkvcli.reading.limits import DEFAULT_MAX_ELEMENTS
from qkvcli.reading.parse import parse_fixture
from qkvcli.reading.problems import FixtureError

BUNDLED_NAME = "ch26-qkv-projections.json"


def bundled_fixture_text(name: str = BUNDLED_NAME) -> str:
    """A fixture shipped inside the package (``qkvcli/data``): the chapter's by default."""
    # A plain read when the package is on disk: importlib.resources pulls in zipfile
    # and friends, several milliseconds of a report that takes few more.
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(package, "data", name)
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    from importlib.resources import files

    return files("qkvcli.data").joinpath(name).read_text(encoding="utf-8")


def read_fixture_text(path: StrPath) -> str:
    """A fixture file as UTF-8 text (a leading byte order mark is left to the JSON reader).

    Raises :class:`~qkvcli.reading.files.InputFileError` (missing, not a regular file,
    unreadable, over ``limits.MAX_FILE_BYTES``) or :class:`FixtureError` (not UTF-8).
    """
    data = read_limited(path, limits.MAX_FILE_BYTES, "fixture")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FixtureError(
            "", f"not UTF-8 text (byte {error.start} is 0x{data[error.start]:02x})"
        ) from None


def fixture_stem(path: StrPath) -> str:
    """The file name without its last suffix (``Path.stem``): a fixture's default chapter."""
    if os.fspath(path) == STDIN:
        return "stdin"
    name = os.path.basename(os.fspath(path).rstrip(os.sep) or os.sep)
    stem, _ = os.path.splitext(name)
    return stem


def fixture_json(
    path: StrPath | None, bundled: str = BUNDLED_NAME
) -> tuple[Any, str, StrPath | None]:
    """The JSON document of the fixture file at ``path`` (``None``: the bundled fixture
    ``bundled``), the chapter it defaults to (its file name's stem) and the directory its
    ``npy`` paths resolve in. Raises as :func:`read_fixture_text` and
    :func:`~qkvcli.reading.json_values.parse_json_text` do."""
    if path is None:
        return parse_json_text(bundled_fixture_text(bundled)), "custom", None
    name = os.fspath(path)
    return parse_json_text(read_fixture_text(name)), fixture_stem(name), (
        os.path.dirname(name) or os.curdir)


def load_fixture(
    path: StrPath | None = None, max_elements: int = DEFAULT_MAX_ELEMENTS
) -> Fixture:
    """Load and validate the fixture file at ``path`` (a ``str`` or a path-like object).

    ``None`` loads the bundled chapter fixture. ``npy`` tensors, in every section, are
    read relative to the file's directory and may not leave it. Raises
    :class:`~qkvcli.reading.files.InputFileError` for a file that cannot be read and
    :class:`FixtureError` for bad content.
    """
    data, chapter, base_dir = fixture_json(path)
    return parse_fixture(data, chapter, max_elements, base_dir)

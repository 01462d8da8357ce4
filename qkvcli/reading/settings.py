"""A fixture's settings: ``gradcheck`` (step, tolerance, samples), ``seed`` and ``chapter``.

Each setting is checked on its own, so ``qkv validate`` reports every bad one; a bad
setting keeps its default while collecting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from qkvcli.gradcheck.settings import (
    DEFAULT_STEP,
    DEFAULT_TOLERANCE,
    GradcheckSettingError,
    ZeroSamples,
    check_step,
    check_tolerance,
)
from qkvcli.reading.fixture import GRADCHECK_KEYS
from qkvcli.reading.json_values import expect_object, finite_number, json_type_name, unknown_keys
from qkvcli.reading.limits import DEFAULT_SEED, MAX_SEED
from qkvcli.reading.problems import FixtureError, Problems


def _by_the_rule(rule: Callable[[float], float], value: float, location: str) -> float:
    """``rule(value)`` (one of :mod:`qkvcli.gradcheck.settings`' rules, the one place a
    setting is judged), its refusal located at ``location`` in the fixture."""
    try:
        return rule(value)
    except GradcheckSettingError as error:
        raise FixtureError(location, str(error)) from None


def parse_step(raw: Any) -> float:
    """``$.gradcheck.step``: a number the central difference can use
    (:func:`~qkvcli.gradcheck.settings.check_step`). Raises :class:`FixtureError`."""
    return _by_the_rule(check_step, finite_number(raw, "$.gradcheck.step"), "$.gradcheck.step")


def parse_tolerance(raw: Any) -> float:
    """``$.gradcheck.tolerance``: a number, not negative
    (:func:`~qkvcli.gradcheck.settings.check_tolerance`). Raises :class:`FixtureError`."""
    return _by_the_rule(check_tolerance, finite_number(raw, "$.gradcheck.tolerance"),
                        "$.gradcheck.tolerance")


def parse_samples(raw_samples: Any) -> int | None:
    """``$.gradcheck.samples``: ``null`` or an integer of at least 1. Raises :class:`FixtureError`."""
    if raw_samples is None:
        return None
    if not (isinstance(raw_samples, int) and not isinstance(raw_samples, bool)):
        raise FixtureError(
            "$.gradcheck.samples", f"expected an integer or null, got {json_type_name(raw_samples)}"
        )
    if raw_samples < 1:
        raise FixtureError("$.gradcheck.samples", str(ZeroSamples()))
    return raw_samples


def parse_seed(raw_seed: Any) -> int:
    """``$.seed``: an integer from 0 to 2**64-1. Raises :class:`FixtureError`."""
    if not (isinstance(raw_seed, int) and not isinstance(raw_seed, bool)):
        raise FixtureError("$.seed", f"expected an integer, got {json_type_name(raw_seed)}")
    if not 0 <= raw_seed <= MAX_SEED:
        raise FixtureError("$.seed", f"seed must be between 0 and {MAX_SEED}")
    return raw_seed


def parse_chapter(raw_chapter: Any) -> str:
    """``$.chapter``: a non-empty single-line string. Raises :class:`FixtureError`."""
    if not isinstance(raw_chapter, str) or not raw_chapter or "\n" in raw_chapter:
        raise FixtureError("$.chapter", "expected a non-empty single-line string")
    return raw_chapter


CHAPTER_KEYS = (("suffix", 30), ("suffix_perturbation", 28), ("prefix_seed", 28),
                ("invariant_tolerance", 29), ("single_token", 27), ("query", 27))
"""Top-level keys only a chapter 27-30 fixture has, and the chapter each points to (the
first found decides: ``query`` beside ``rope`` is chapter 29's)."""


class LaterChapterFixture(FixtureError):
    """A chapter 27-30 fixture given to the layer's reader (``qkv attend``), whose keys it
    would only call unknown: the message names ``qkv run --chapter N FILE`` once the
    file is known (:meth:`~qkvcli.core.errors.QkvError.in_file`)."""

    def __init__(self, location: str, said: str, chapter: int) -> None:
        self.said, self.chapter = said, chapter
        super().__init__(location, said)

    def __str__(self) -> str:
        return (f"{self.location}: {self.said}; qkv attend runs attention layers: run it "
                f"with qkv run --chapter {self.chapter} {self.file or 'FIXTURE'}")


def refuse_chapter_fixture(data: Any) -> None:
    """Raise for a chapter 27-30 document given to the layer's reader: a misspelt
    ``chapter`` as such (:func:`misnamed_chapter`), a chapter's id or a key only a
    chapter has as :class:`LaterChapterFixture`."""
    from qkvcli.core.names import CHAPTER_IDS, DEFAULT_CHAPTER, chapter_of_id

    if not isinstance(data, dict):
        return
    misnamed = misnamed_chapter(data)
    if misnamed is not None:
        raise misnamed
    number = chapter_of_id(data.get("chapter"))
    if number is not None and number != DEFAULT_CHAPTER:
        raise LaterChapterFixture("$.chapter",
                             f"a chapter {number} fixture ({CHAPTER_IDS[number]})", number)
    for key, chapter in CHAPTER_KEYS:
        if key in data:
            chapter = 29 if key in ("query", "single_token") and "rope" in data else chapter
            chapter = 28 if chapter == 27 and "prefix_seed" in data else chapter
            raise LaterChapterFixture(f"$.{key}", f"a chapter {chapter} fixture's key", chapter)


def misnamed_chapter(data: Any) -> FixtureError | None:
    """The one problem of a document whose ``chapter`` looks meant for chapter 27 to 30 but
    is not its id (``"27-self-atention"``, ``"27"``, ``"self-attention"``, the number
    ``30``), naming the id; ``None`` otherwise. Without it such a fixture is read as
    chapter 26's, whose ``chapter`` is any label, and fails on every key it does not know.
    """
    from qkvcli.core.names import CHAPTER_IDS, chapter_of_id

    if not isinstance(data, dict) or "chapter" not in data:
        return None
    value = data["chapter"]
    if chapter_of_id(value) is not None:
        return None
    meant = _meant_chapter(value)
    if meant is None:
        return _unknown_chapter(data)
    if isinstance(value, str):
        import json

        shown = json.dumps(value, ensure_ascii=False)
        said = f"{shown[:60]}{'...' if len(shown) > 60 else ''} is not a chapter's id"
    else:
        said = f"the number {value!r} is not a chapter's id"
    return FixtureError("$.chapter", f'{said}; chapter {meant}\'s is "{CHAPTER_IDS[meant]}"')


def _unknown_chapter(data: dict[str, Any]) -> FixtureError | None:
    """The problem of a later chapter's document (one with a key only chapters 27 to 37
    have) whose ``chapter`` is an id of the chapters' form for a chapter qkv does not
    read (``"31-ffn"``), naming the ids it reads; ``None`` otherwise (chapter 26's and a
    layer's ``chapter`` is any label)."""
    import json
    import re

    from qkvcli.core.names import CHAPTER_IDS

    value = data["chapter"]
    later = {key for key, _ in CHAPTER_KEYS} | {"capacity"}
    if not isinstance(value, str) or not later & set(data):
        return None
    if re.fullmatch(r"(?:ch(?:apter)?-?)?\d+-[a-z][a-z0-9-]*", value.strip().lower()) is None:
        return None
    shown = json.dumps(value, ensure_ascii=False)
    known = ", ".join(f'"{name}"' for name in CHAPTER_IDS.values())
    return FixtureError("$.chapter", f"{shown[:60]}{'...' if len(shown) > 60 else ''} is not "
                        f"a chapter's id; qkv reads {known}")


def _meant_chapter(value: Any) -> int | None:
    """The chapter ``value`` seems to mean: its number (``30``, ``"27"``, ``"ch29-rope"``),
    or a spelling near a later chapter's name (``"self-attention"``, ``"Causal masking"``)."""
    import difflib
    import re

    from qkvcli.core.names import CHAPTER_IDS, DEFAULT_CHAPTER

    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value) if value == int(value) and int(value) in CHAPTER_IDS else None
    if not isinstance(value, str):
        return None
    text = re.sub(r"[\s_]+", "-", value.strip().lower())
    number = re.match(r"(?:ch(?:apter)?-?)?(\d+)(?![\d.])", text)
    if number is not None:
        found = int(number.group(1))
        return found if found in CHAPTER_IDS and found != DEFAULT_CHAPTER else None
    for chapter, known in CHAPTER_IDS.items():
        name = known.split("-", 1)[1]
        if chapter != DEFAULT_CHAPTER and difflib.SequenceMatcher(None, text, name).ratio() >= 0.85:
            return chapter
    return None


def parse_gradcheck(
    raw_check: Any, problems: Problems
) -> tuple[float, float, int | None]:
    """``(step, tolerance, samples)`` from ``$.gradcheck`` (``None``: the defaults)."""
    step, tolerance, samples = DEFAULT_STEP, DEFAULT_TOLERANCE, None
    if raw_check is None:
        return step, tolerance, samples
    check = expect_object(raw_check, "$.gradcheck", problems)
    if check is None:
        return step, tolerance, samples
    for error in unknown_keys(check, GRADCHECK_KEYS, "$.gradcheck"):
        problems.add(error)
    if "step" in check:
        step = problems.attempt(parse_step, check["step"]) or step
    if "tolerance" in check:
        found = problems.attempt(parse_tolerance, check["tolerance"])
        tolerance = tolerance if found is None else found
    samples = problems.attempt(parse_samples, check.get("samples"))
    return step, tolerance, samples


def parse_seed_and_chapter(
    data: dict[str, Any], default_chapter: str, problems: Problems
) -> tuple[int, str]:
    """``(seed, chapter)`` from the document; missing or bad ones keep their defaults."""
    seed = DEFAULT_SEED
    if "seed" in data:
        found_seed = problems.attempt(parse_seed, data["seed"])
        seed = seed if found_seed is None else found_seed
    chapter = default_chapter
    if "chapter" in data:
        chapter = problems.attempt(parse_chapter, data["chapter"]) or chapter
    return seed, chapter

"""Typed errors of the Q/K/V engine.

Each error stores its fields and formats its own message. The wording follows the
course's reference implementation so that messages printed by qkv and by the
reference can be compared directly.
"""

from __future__ import annotations

import math


def format_float_debug(value: float) -> str:
    """Format a float the way the reference's debug formatting prints it.

    Only the non-finite spellings matter for messages (``NaN``, ``inf``, ``-inf``);
    finite values print as Python's shortest round-trip representation.
    """
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(float(value))


class QkvError(ValueError):
    """Base class of every rejected parameter set, input, or construction.

    ``file`` names the input file the error concerns once a reader knows it; the CLI
    prints ``FILE: message`` (see ``qkvcli/cli/group.py``, the one translation).
    """

    file: str | None = None

    def in_file(self, file: str) -> QkvError:
        """This error, naming ``file`` unless it already names one."""
        if self.file is None:
            self.file = file
        return self

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted(vars(self).items(), key=lambda kv: kv[0]))))

    def __repr__(self) -> str:
        fields = ", ".join(f"{key}={value!r}" for key, value in vars(self).items())
        return f"{type(self).__name__}({fields})"


# --- parameter names and values ---------------------------------------------------------


class EmptyName(QkvError):
    def __init__(self) -> None:
        super().__init__("parameter name must not be empty")


class EmptyNameSegment(QkvError):
    def __init__(self, index: int) -> None:
        self.index = index
        super().__init__(f"parameter name has an empty dot-separated segment at byte {index}")


class InvalidNameCharacter(QkvError):
    def __init__(self, index: int, byte: int) -> None:
        self.index = index
        self.byte = byte
        super().__init__(
            f"parameter name byte {index} must be lowercase ASCII, a digit, underscore, "
            f"or dot; got 0x{byte:02x}"
        )


class DuplicateName(QkvError):
    def __init__(self, name: str, first: int, repeated: int) -> None:
        self.name = name
        self.first = first
        self.repeated = repeated
        super().__init__(
            f'parameter name "{name}" first appears at index {first} '
            f"and repeats at index {repeated}"
        )


class NonFiniteValue(QkvError):
    """A tensor holds NaN or an infinity. ``operation`` names the tensor's role."""

    def __init__(self, operation: str, index: int, value: float) -> None:
        self.operation = operation
        self.index = index
        self.value = value
        super().__init__(
            f"{operation} tensor value at flat index {index} must be finite, "
            f"got {format_float_debug(value)}"
        )

    def __eq__(self, other: object) -> bool:
        # NaN != NaN, so compare the formatted value instead of the float.
        return (
            isinstance(other, NonFiniteValue)
            and (self.operation, self.index) == (other.operation, other.index)
            and format_float_debug(self.value) == format_float_debug(other.value)
        )

    def __hash__(self) -> int:
        return hash((self.operation, self.index, format_float_debug(self.value)))


# --- one linear branch ------------------------------------------------------------------


class LinearError(QkvError):
    """A rejection inside one linear projection (weight rank or widths)."""


class WeightRank(LinearError):
    def __init__(self, rank: int) -> None:
        self.rank = rank
        super().__init__(f"linear weight must have rank two, got rank {rank}")


class ZeroInputWidth(LinearError):
    def __init__(self) -> None:
        super().__init__("linear input width must be greater than zero")


class ZeroOutputWidth(LinearError):
    def __init__(self) -> None:
        super().__init__("linear output width must be greater than zero")


class ProjectionError(QkvError):
    """A branch (query, key or value) rejected its weight: ``"<branch> projection: <cause>"``."""

    def __init__(self, projection: str, source: QkvError) -> None:
        self.projection = projection
        self.source = source
        super().__init__(f"{projection} projection: {source}")


# --- the three branches together and the input ------------------------------------------


class BranchInputWidthMismatch(QkvError):
    def __init__(self, query: int, key: int, value: int) -> None:
        self.query = query
        self.key = key
        self.value = value
        super().__init__(
            f"Q/K/V model widths must match, got query {query}, key {key}, value {value}"
        )


class BranchOutputWidthMismatch(QkvError):
    def __init__(self, query: int, key: int, value: int) -> None:
        self.query = query
        self.key = key
        self.value = value
        super().__init__(
            f"Q/K/V head widths must match, got query {query}, key {key}, value {value}"
        )


class InputRank(QkvError):
    def __init__(self, rank: int) -> None:
        self.rank = rank
        super().__init__(
            f"Q/K/V input must have rank three [batch, tokens, model_width], got rank {rank}"
        )


class InputWidthMismatch(QkvError):
    def __init__(self, expected: int, actual: int) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"Q/K/V input final width must equal model width {expected}, got {actual}"
        )


class GradientShapeMismatch(QkvError):
    """An upstream gradient does not have the shape of the output it flows into."""

    def __init__(self, branch: str, expected: tuple[int, ...], actual: tuple[int, ...]) -> None:
        self.branch = branch
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"{branch} upstream gradient must have shape {format_shape(expected)}, "
            f"got {format_shape(actual)}"
        )


def format_shape(shape: tuple[int, ...] | list[int]) -> str:
    """``[1,2,3]``: the reference's compact shape spelling."""
    return "[" + ",".join(str(int(dim)) for dim in shape) + "]"


class Refused(QkvError):
    """A refusal said in one sentence, its ``detail`` (the settings' own words)."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(detail)


class RopeError(Refused):
    """Rotary position embedding settings the head cannot apply."""

"""Number, vector and shape spellings shared by the plain renderers."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt  # annotations only: it costs ~1.5 ms of start-up


def fmt_float(value: float, precision: int = 6) -> str:
    """``{:.6}`` as the reference prints it: fixed point, negative zero keeps its sign."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{precision}f}"


def fmt_vector(values: npt.ArrayLike, precision: int = 6) -> str:
    """``[1.000000,2.000000]``: every value of a tensor, flat, row-major."""
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    return "[" + ",".join(fmt_float(float(v), precision) for v in flat.tolist()) + "]"


def fmt_shape(shape: Iterable[int]) -> str:
    """``[1,2,3]``."""
    return "[" + ",".join(str(int(d)) for d in shape) + "]"


def fmt_bool(flag: bool) -> str:
    return "true" if flag else "false"

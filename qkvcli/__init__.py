"""qkv: evidence reports for the query/key/value projections of self-attention.

Library use::

    from qkvcli import QkvProjections
    projections = QkvProjections.from_arrays(w_query, w_key, w_value)
    q, k, v = projections.forward(x)
    grads = projections.backward(x, grad_q, grad_k, grad_v)   # .grad_input, .grad_w_query, ...

The engine is imported lazily so that ``qkv --help`` and ``qkv --version`` stay quick.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

__all__ = [
    "Fixture",
    "QkvError",
    "QkvForward",
    "QkvGradients",
    "QkvProjections",
    "SplitMix64",
    "__version__",
    "build_evidence",
    "load_fixture",
]

if TYPE_CHECKING:
    from qkvcli.check.chapter26 import build_evidence
    from qkvcli.core.errors import QkvError
    from qkvcli.core.outputs import QkvForward, QkvGradients
    from qkvcli.core.projections import QkvProjections
    from qkvcli.core.splitmix import SplitMix64
    from qkvcli.reading.fixture import Fixture
    from qkvcli.reading.load import load_fixture

_LAZY = {
    "QkvProjections": "qkvcli.core.projections",
    "QkvForward": "qkvcli.core.outputs",
    "QkvGradients": "qkvcli.core.outputs",
    "QkvError": "qkvcli.core.errors",
    "SplitMix64": "qkvcli.core.splitmix",
    "Fixture": "qkvcli.reading.fixture",
    "load_fixture": "qkvcli.reading.load",
    "build_evidence": "qkvcli.check.chapter26",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'qkvcli' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)

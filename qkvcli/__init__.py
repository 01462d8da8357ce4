"""qkv: evidence reports for the query/key/value projections of self-attention.

Library use::

    from qkvcli import QkvProjections
    layer = QkvProjections.from_arrays(w_query, w_key, w_value)
    q, k, v = layer.forward(x)
    grads = layer.backward(x, grad_q, grad_k, grad_v)   # grads.input, .query, .key, .value

The engine is imported lazily so that ``qkv --help`` and ``qkv --version`` stay quick.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

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
    from qkvcli.engine import QkvForward, QkvGradients, QkvProjections
    from qkvcli.errors import QkvError
    from qkvcli.evidence import build_evidence
    from qkvcli.fixture import Fixture, load_fixture
    from qkvcli.splitmix import SplitMix64

_LAZY = {
    "QkvProjections": "qkvcli.engine",
    "QkvForward": "qkvcli.engine",
    "QkvGradients": "qkvcli.engine",
    "QkvError": "qkvcli.errors",
    "SplitMix64": "qkvcli.splitmix",
    "Fixture": "qkvcli.fixture",
    "load_fixture": "qkvcli.fixture",
    "build_evidence": "qkvcli.evidence",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'qkvcli' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)

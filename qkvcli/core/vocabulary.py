"""The one vocabulary of qkv: branch order and the names of outputs and gradients.

Everywhere in the code (engine, attention, checks, renderers):

- outputs are ``query``, ``key``, ``value`` (Q, K, V), always in that order;
- the upstream gradients of the loss with respect to them are ``grad_query``,
  ``grad_key``, ``grad_value`` (dL/dQ, ...);
- the input gradient is ``grad_input`` (dL/dX), the weight gradients are
  ``grad_w_query``, ``grad_w_key``, ``grad_w_value`` (dL/dW_Q, ...) and bias gradients
  ``grad_b_query``, ... .

The JSON report keeps its published key names (``input_gradient``,
``query_weight_gradient``, ...); only renderers translate to them.
"""

from __future__ import annotations

BRANCHES: tuple[str, str, str] = ("query", "key", "value")

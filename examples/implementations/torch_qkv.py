"""A correct Q/K/V projection in PyTorch (float64 autograd). Needs ``torch`` installed.

    qkv check examples/implementations/torch_qkv.py

``forward`` treats the weights as a module treats its parameters (``requires_grad``),
so its outputs require grad too: qkv detaches returned tensors itself, no glue needed.
``backward`` re-runs the forward under autograd and asks for the gradients of
``L = <Q,dQ> + <K,dK> + <V,dV>``.
"""

import torch


def _tensors(*arrays):
    return [torch.from_numpy(a).to(torch.float64) for a in arrays]


def _forward(x, w_query, w_key, w_value):
    if x.dim() != 3:
        raise ValueError(f"input must have rank 3, got rank {x.dim()}")
    if any(w.dim() != 2 for w in (w_query, w_key, w_value)):
        raise ValueError("weights must have rank 2")
    if not w_query.shape == w_key.shape == w_value.shape:
        raise ValueError("Q/K/V weights must share [d_model, d_head]")
    if x.shape[-1] != w_query.shape[0]:
        raise ValueError("input width must equal the weights' rows")
    return x @ w_query, x @ w_key, x @ w_value


def forward(x, w_query, w_key, w_value):
    x, *weights = _tensors(x, w_query, w_key, w_value)
    return _forward(x, *(w.requires_grad_() for w in weights))


def backward(x, w_query, w_key, w_value, grad_query, grad_key, grad_value):
    inputs = [t.requires_grad_() for t in _tensors(x, w_query, w_key, w_value)]
    outputs = _forward(*inputs)
    upstream = _tensors(grad_query, grad_key, grad_value)
    for out, up in zip(outputs, upstream, strict=True):
        if out.shape != up.shape:
            raise ValueError("upstream gradient shape must match its output")
    loss = sum((out * up).sum() for out, up in zip(outputs, upstream, strict=True))
    grads = torch.autograd.grad(loss, inputs, allow_unused=True)
    return tuple(torch.zeros_like(t) if g is None else g for g, t in zip(grads, inputs, strict=True))

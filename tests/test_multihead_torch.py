"""The multi-head layer against ``torch.nn.MultiheadAttention`` in float64 (skipped without torch).

Output, every head's weights (``average_attn_weights=False``) and every gradient agree to
1e-10, causal or not, with and without biases and the output projection.
"""

from __future__ import annotations

import numpy as np
import pytest

from qkvcli.attention.head import AttentionHead
from qkvcli.attention.multihead import MultiHeadLayer

torch = pytest.importorskip("torch")

TOL = 1e-10
CASES = [(causal, bias, out_proj, heads)
         for causal in (False, True) for bias in (False, True) for out_proj in (False, True)
         for heads in (1, 2, 4)]


def _torch_run(mha, x, upstream, causal):
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    tokens = x.shape[1]
    mask = torch.triu(torch.ones(tokens, tokens, dtype=torch.bool), 1) if causal else None
    out, weights = mha(xt, xt, xt, attn_mask=mask, need_weights=True, average_attn_weights=False)
    (out * torch.tensor(upstream)).sum().backward()
    return out.detach().numpy(), weights.detach().numpy(), xt.grad.numpy()


@pytest.mark.parametrize(("causal", "bias", "out_proj", "heads"), CASES,
                         ids=[f"causal={c}-bias={b}-out_proj={o}-H={h}" for c, b, o, h in CASES])
def test_layer_matches_torch_multihead_attention(causal, bias, out_proj, heads):
    embed, batch, tokens = 8, 2, 5
    torch.manual_seed(heads + 10 * causal + 100 * bias)
    mha = torch.nn.MultiheadAttention(embed, heads, bias=bias, batch_first=True,
                                      dtype=torch.float64)
    if bias:  # torch starts biases at zero; make them count
        with torch.no_grad():
            mha.in_proj_bias.normal_()
            mha.out_proj.bias.normal_()
    if not out_proj:  # the layer without out_proj is torch's with an identity out_proj
        with torch.no_grad():
            mha.out_proj.weight.copy_(torch.eye(embed, dtype=torch.float64))
            if bias:
                mha.out_proj.bias.zero_()
    rng = np.random.default_rng(7)
    x = rng.normal(size=(batch, tokens, embed))
    upstream = rng.normal(size=(batch, tokens, embed))
    out_t, weights_t, grad_x_t = _torch_run(mha, x, upstream, causal)

    packed = mha.in_proj_weight.detach().numpy()  # [3E, E], torch layout
    packed_bias = mha.in_proj_bias.detach().numpy() if bias else None
    branches = [packed[i * embed:(i + 1) * embed].T for i in range(3)]
    biases = [None if packed_bias is None else packed_bias[i * embed:(i + 1) * embed]
              for i in range(3)]
    head = AttentionHead.from_arrays(*branches, biases=biases)
    out_weight = mha.out_proj.weight.detach().numpy().T if out_proj else None
    out_bias = mha.out_proj.bias.detach().numpy() if (out_proj and bias) else None
    layer = MultiHeadLayer.build(head, heads, out_weight, out_bias)
    forward = layer.forward(x, causal)
    grads = layer.backward(x, forward, upstream)

    np.testing.assert_allclose(forward.output, out_t, rtol=0, atol=TOL)
    np.testing.assert_allclose(forward.attention, weights_t, rtol=0, atol=TOL)
    np.testing.assert_allclose(grads.grad_input, grad_x_t, rtol=0, atol=TOL)
    grad_packed = np.concatenate([grads.grad_w_query.T, grads.grad_w_key.T, grads.grad_w_value.T])
    np.testing.assert_allclose(grad_packed, mha.in_proj_weight.grad.numpy(), rtol=0, atol=TOL)
    if bias:
        grad_b = np.concatenate([grads.grad_b_query, grads.grad_b_key, grads.grad_b_value])
        np.testing.assert_allclose(grad_b, mha.in_proj_bias.grad.numpy(), rtol=0, atol=TOL)
    if out_proj:
        np.testing.assert_allclose(grads.grad_out_weight.T, mha.out_proj.weight.grad.numpy(),
                                   rtol=0, atol=TOL)
        if bias:
            np.testing.assert_allclose(grads.grad_out_bias, mha.out_proj.bias.grad.numpy(),
                                       rtol=0, atol=TOL)
    else:
        assert grads.grad_out_weight is None

//! One attention head (chapter 27) on top of any [`Projections`]: it knows nothing of
//! JSON, and calls the layer for `Q, K, V` and for the projections' reverse pass.
//!
//! Forward: `scores = Q K^T / sqrt(d_k)` `[B,T,T]` (before the mask), `weights` = the
//! softmax of each row of the masked scores (the row maximum subtracted first, so large
//! scores cannot overflow), `output = weights V`. Reverse, for `dO`: `dA = dO V^T`,
//! `dV = A^T dO`, `dZ = A * (dA - rowsum(dA * A))`, `dS = dZ / sqrt(d_k)`, `dQ = dS K`,
//! `dK = dS^T Q`, then the layer's backward gives `dX` and the weight gradients.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::protocol::Projections;
use crate::tensor::{matmul, matmul_transposed_left, matmul_transposed_right, Tensor};

/// WRONG on purpose when set (`--wrong head-no-rowsum`): the softmax backward without its
/// row-sum term, `dZ = A * dA`.
pub static NO_ROW_SUM: AtomicBool = AtomicBool::new(false);

/// Every intermediate of a forward pass: `[Q, K, V]`, the scores, the weights, the output.
struct Pass {
    qkv: [Tensor; 3],
    scores: Vec<f64>,
    weights: Vec<f64>,
    output: Vec<f64>,
    batch: usize,
    tokens: usize,
    d: usize,
}

fn run<P: Projections>(layer: &P, input: &Tensor, causal: bool) -> Result<Pass, String> {
    let qkv = layer.forward(input)?;
    let (batch, tokens, d) = (qkv[0].shape[0], qkv[0].shape[1], qkv[0].shape[2]);
    let scale = (d as f64).sqrt();
    let (mut scores, mut weights, mut output) = (Vec::new(), Vec::new(), Vec::new());
    for b in 0..batch {
        let slice = |t: &Tensor| t.values[b * tokens * d..(b + 1) * tokens * d].to_vec();
        let (q, k, v) = (slice(&qkv[0]), slice(&qkv[1]), slice(&qkv[2]));
        // [T, d] @ [T, d]^T -> [T, T], scaled
        let s: Vec<f64> = matmul_transposed_right(&q, &k, tokens, d, tokens).iter()
            .map(|x| x / scale).collect();
        let mut a = vec![0.0; tokens * tokens];
        for i in 0..tokens {
            let seen = if causal { i + 1 } else { tokens }; // causal: later positions masked
            let row = &s[i * tokens..i * tokens + seen];
            let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let total: f64 = row.iter().map(|x| (x - max).exp()).sum();
            for j in 0..seen {
                a[i * tokens + j] = (s[i * tokens + j] - max).exp() / total;
            }
        }
        output.extend(matmul(&a, &v, tokens, tokens, d)); // [T, T] @ [T, d]
        scores.extend(s);
        weights.extend(a);
    }
    Ok(Pass { qkv, scores, weights, output, batch, tokens, d })
}

/// `[scores, weights, output]`.
pub fn head_forward<P: Projections>(layer: &P, input: &Tensor, causal: bool) -> Result<[Tensor; 3], String> {
    let pass = run(layer, input, causal)?;
    let square = vec![pass.batch, pass.tokens, pass.tokens];
    Ok([
        Tensor::new(square.clone(), pass.scores)?,
        Tensor::new(square, pass.weights)?,
        Tensor::new(vec![pass.batch, pass.tokens, pass.d], pass.output)?,
    ])
}

/// `[grad_input, grad_w_query, grad_w_key, grad_w_value]` for `grad_output` `[B, T, d_head]`.
pub fn head_backward<P: Projections>(layer: &P, input: &Tensor, causal: bool,
                                     grad_output: &Tensor) -> Result<[Tensor; 4], String> {
    let pass = run(layer, input, causal)?;
    let (tokens, d) = (pass.tokens, pass.d);
    let expected = vec![pass.batch, tokens, d];
    if grad_output.shape != expected {
        return Err(format!("grad_output must have shape {expected:?}, got {:?}", grad_output.shape));
    }
    let mut grads = [Vec::new(), Vec::new(), Vec::new()]; // dQ, dK, dV
    for b in 0..pass.batch {
        let at = |values: &[f64]| values[b * tokens * d..(b + 1) * tokens * d].to_vec();
        let a = &pass.weights[b * tokens * tokens..(b + 1) * tokens * tokens];
        let g = at(&grad_output.values);
        let grad_a = matmul_transposed_right(&g, &at(&pass.qkv[2].values), tokens, d, tokens);
        let mut grad_s = vec![0.0; tokens * tokens];
        for i in 0..tokens {
            let mut row_sum: f64 = (0..tokens).map(|j| grad_a[i * tokens + j] * a[i * tokens + j]).sum();
            if NO_ROW_SUM.load(Ordering::Relaxed) {
                row_sum = 0.0;
            }
            for j in 0..tokens {
                grad_s[i * tokens + j] = a[i * tokens + j] * (grad_a[i * tokens + j] - row_sum) / (d as f64).sqrt();
            }
        }
        grads[0].extend(matmul(&grad_s, &at(&pass.qkv[1].values), tokens, tokens, d)); // dS K
        grads[1].extend(matmul_transposed_left(&grad_s, &at(&pass.qkv[0].values), tokens, tokens, d)); // dS^T Q
        grads[2].extend(matmul_transposed_left(a, &g, tokens, tokens, d)); // A^T dO
    }
    let [dq, dk, dv] = grads.map(|values| Tensor { shape: expected.clone(), values });
    layer.backward(input, [&dq, &dk, &dv])
}

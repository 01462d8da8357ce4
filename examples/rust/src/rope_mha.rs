//! RoPE (chapter 29) and multi-head attention (chapter 30), knowing nothing of JSON.
//!
//! RoPE turns each adjacent pair `(2i, 2i+1)` of a row at token `t` by the angle
//! `(offset + t) * base^(-2i/width)`; turning back (the reverse) uses the same angles with
//! the sine's sign flipped. Multi-head attention splits `X W_Q`, `X W_K`, `X W_V` (each
//! `[d_model, d_model]`) into `heads` heads of width `d_h` (head `h` takes columns
//! `h*d_h .. (h+1)*d_h`), turns each head's queries and keys with RoPE when asked, attends
//! in each head (scores scaled by `1/sqrt(d_h)`, the causal mask, the row softmax), puts
//! each head's output back in its columns (`merged`) and applies `W_O`.

use crate::tensor::{matmul, matmul_transposed_left, matmul_transposed_right, Tensor};

/// RoPE's settings: the base, the first position, and `sign` 1.0 (turn) or -1.0 (back).
#[derive(Clone, Copy)]
pub struct Rope {
    pub base: f64,
    pub offset: usize,
}

/// Refuse what RoPE cannot turn: an odd or zero width, a base that is not positive.
pub fn check_rope(width: usize, base: f64) -> Result<(), String> {
    if width == 0 || width % 2 == 1 {
        return Err(format!("RoPE needs an even, non-zero width, got {width}"));
    }
    if !(base.is_finite() && base > 0.0) {
        return Err(format!("RoPE needs a positive base, got {base}"));
    }
    Ok(())
}

/// `values` (rows of `width`, `tokens` rows per sequence) with each row's pairs turned.
pub fn turn(values: &[f64], tokens: usize, width: usize, rope: Rope, sign: f64) -> Vec<f64> {
    let mut out = values.to_vec();
    if tokens == 0 || width == 0 {
        return out;
    }
    for row in 0..values.len() / width {
        let position = (rope.offset + row % tokens) as f64;
        for i in 0..width / 2 {
            let angle = position * rope.base.powf(-2.0 * i as f64 / width as f64);
            let (sin, cos) = angle.sin_cos();
            let (a, b) = (values[row * width + 2 * i], values[row * width + 2 * i + 1]);
            out[row * width + 2 * i] = a * cos - sign * b * sin;
            out[row * width + 2 * i + 1] = b * cos + sign * a * sin;
        }
    }
    out
}

/// A multi-head layer: `[W_Q, W_K, W_V, W_O]`, each `[d_model, d_model]`.
pub struct MultiHead {
    weights: [Tensor; 4],
    heads: usize,
    rope: Option<Rope>,
    width: usize,
    size: usize,
}

/// One head of one batch item in a forward pass: its turned queries and keys, values, weights.
struct HeadPass {
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    a: Vec<f64>,
}

impl MultiHead {
    /// Validate and build. `Err` for weights that are not square of one width, a head count
    /// that does not divide it, an odd head width with RoPE.
    pub fn new(weights: [Tensor; 4], heads: usize, rope: Option<Rope>) -> Result<MultiHead, String> {
        let width = weights[0].shape.first().copied().unwrap_or(0);
        if weights.iter().any(|w| w.shape != [width, width]) {
            return Err(format!("weights must all be [{width},{width}]"));
        }
        if heads == 0 || width % heads != 0 {
            return Err(format!("{heads} heads do not divide d_model {width}"));
        }
        if let Some(r) = rope {
            check_rope(width / heads, r.base)?;
        }
        Ok(MultiHead { weights, heads, rope, width, size: width / heads })
    }

    /// Head `h` of batch item `b`: its columns of `y` `[B*T, width]`, `[T, size]`.
    fn columns(&self, y: &[f64], b: usize, h: usize, tokens: usize) -> Vec<f64> {
        let mut out = Vec::with_capacity(tokens * self.size);
        for t in 0..tokens {
            let start = (b * tokens + t) * self.width + h * self.size;
            out.extend_from_slice(&y[start..start + self.size]);
        }
        out
    }

    fn place(&self, into: &mut [f64], from: &[f64], b: usize, h: usize, tokens: usize) {
        for t in 0..tokens {
            let start = (b * tokens + t) * self.width + h * self.size;
            into[start..start + self.size].copy_from_slice(&from[t * self.size..(t + 1) * self.size]);
        }
    }

    fn turned(&self, values: Vec<f64>, tokens: usize, sign: f64) -> Vec<f64> {
        match self.rope {
            Some(rope) => turn(&values, tokens, self.size, rope, sign),
            None => values,
        }
    }

    fn run(&self, input: &Tensor, causal: bool) -> Result<(Vec<HeadPass>, Vec<f64>, usize, usize), String> {
        if input.shape.len() != 3 || input.shape[2] != self.width {
            return Err(format!("input must be [batch, tokens, {}], got {:?}", self.width, input.shape));
        }
        let (batch, tokens) = (input.shape[0], input.shape[1]);
        let rows = batch * tokens;
        let project = |w: &Tensor| matmul(&input.values, &w.values, rows, self.width, self.width);
        let (q, k, v) = (project(&self.weights[0]), project(&self.weights[1]), project(&self.weights[2]));
        let mut merged = vec![0.0; rows * self.width];
        let mut passes = Vec::new();
        let scale = (self.size as f64).sqrt();
        for b in 0..batch {
            for h in 0..self.heads {
                let qh = self.turned(self.columns(&q, b, h, tokens), tokens, 1.0);
                let kh = self.turned(self.columns(&k, b, h, tokens), tokens, 1.0);
                let vh = self.columns(&v, b, h, tokens);
                let s = matmul_transposed_right(&qh, &kh, tokens, self.size, tokens);
                let mut a = vec![0.0; tokens * tokens];
                for i in 0..tokens {
                    let seen = if causal { i + 1 } else { tokens };
                    let row: Vec<f64> = s[i * tokens..i * tokens + seen].iter().map(|x| x / scale).collect();
                    let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let total: f64 = row.iter().map(|x| (x - max).exp()).sum();
                    for (j, x) in row.iter().enumerate() {
                        a[i * tokens + j] = (x - max).exp() / total;
                    }
                }
                let o = matmul(&a, &vh, tokens, tokens, self.size);
                self.place(&mut merged, &o, b, h, tokens);
                passes.push(HeadPass { q: qh, k: kh, v: vh, a });
            }
        }
        Ok((passes, merged, batch, tokens))
    }

    /// `[weights [B,H,T,T], merged [B,T,d_model], output [B,T,d_model]]`.
    pub fn forward(&self, input: &Tensor, causal: bool) -> Result<[Tensor; 3], String> {
        let (passes, merged, batch, tokens) = self.run(input, causal)?;
        let weights: Vec<f64> = passes.iter().flat_map(|p| p.a.iter().cloned()).collect();
        let output = matmul(&merged, &self.weights[3].values, batch * tokens, self.width, self.width);
        Ok([
            Tensor::new(vec![batch, self.heads, tokens, tokens], weights)?,
            Tensor::new(input.shape.clone(), merged)?,
            Tensor::new(input.shape.clone(), output)?,
        ])
    }

    /// `[grad_input, grad_w_query, grad_w_key, grad_w_value, grad_w_output]`.
    pub fn backward(&self, input: &Tensor, causal: bool, grad_output: &Tensor) -> Result<[Tensor; 5], String> {
        let (passes, merged, batch, tokens) = self.run(input, causal)?;
        if grad_output.shape != input.shape {
            return Err(format!("grad_output must have shape {:?}, got {:?}", input.shape, grad_output.shape));
        }
        let (rows, width) = (batch * tokens, self.width);
        let grad_w_output = matmul_transposed_left(&merged, &grad_output.values, rows, width, width);
        let grad_merged = matmul_transposed_right(&grad_output.values, &self.weights[3].values, rows, width, width);
        let mut grads = [vec![0.0; rows * width], vec![0.0; rows * width], vec![0.0; rows * width]];
        let scale = (self.size as f64).sqrt();
        for b in 0..batch {
            for h in 0..self.heads {
                let pass = &passes[b * self.heads + h];
                let g = self.columns(&grad_merged, b, h, tokens);
                let grad_a = matmul_transposed_right(&g, &pass.v, tokens, self.size, tokens);
                let mut grad_s = vec![0.0; tokens * tokens];
                for i in 0..tokens {
                    let row_sum: f64 = (0..tokens).map(|j| grad_a[i * tokens + j] * pass.a[i * tokens + j]).sum();
                    for j in 0..tokens {
                        grad_s[i * tokens + j] = pass.a[i * tokens + j] * (grad_a[i * tokens + j] - row_sum) / scale;
                    }
                }
                let dq = self.turned(matmul(&grad_s, &pass.k, tokens, tokens, self.size), tokens, -1.0);
                let dk = self.turned(matmul_transposed_left(&grad_s, &pass.q, tokens, tokens, self.size), tokens, -1.0);
                let dv = matmul_transposed_left(&pass.a, &g, tokens, tokens, self.size);
                for (branch, values) in [dq, dk, dv].iter().enumerate() {
                    self.place(&mut grads[branch], values, b, h, tokens);
                }
            }
        }
        let mut grad_input = vec![0.0; rows * width];
        for (branch, values) in grads.iter().enumerate() {
            let path = matmul_transposed_right(values, &self.weights[branch].values, rows, width, width);
            grad_input.iter_mut().zip(path).for_each(|(total, x)| *total += x);
        }
        let weight = |values: &Vec<f64>| matmul_transposed_left(&input.values, values, rows, width, width);
        Ok([
            Tensor::new(input.shape.clone(), grad_input)?,
            Tensor::new(vec![width, width], weight(&grads[0]))?,
            Tensor::new(vec![width, width], weight(&grads[1]))?,
            Tensor::new(vec![width, width], weight(&grads[2]))?,
            Tensor::new(vec![width, width], grad_w_output)?,
        ])
    }
}

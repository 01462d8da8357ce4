//! The chapter's layer: three bias-free projections of one shared input.
//!
//! Forward: `Q = X W_Q`, `K = X W_K`, `V = X W_V` over the last axis. Backward: the
//! three paths add into the shared input, `dX = dQ W_Q^T + dK W_K^T + dV W_V^T`, while
//! each weight gradient stays on its own branch, `dW_Q = X^T dQ` (and so on).
//! Nothing here knows about JSON or the protocol: this is "your existing type".

use std::fmt;

use crate::tensor::{matmul, matmul_transposed_left, matmul_transposed_right, Tensor};

/// Branch order everywhere: query, key, value.
pub const BRANCHES: [&str; 3] = ["query", "key", "value"];

/// Why a set of weights, an input or an upstream gradient was rejected.
#[derive(Clone, Debug, PartialEq)]
pub enum ShapeError {
    WeightRank { branch: &'static str, rank: usize },
    ModelWidths { query: usize, key: usize, value: usize },
    HeadWidths { query: usize, key: usize, value: usize },
    InputRank { rank: usize },
    InputWidth { expected: usize, actual: usize },
    GradientShape { branch: &'static str, expected: Vec<usize>, actual: Vec<usize> },
}

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShapeError::WeightRank { branch, rank } => {
                write!(f, "{branch} projection: linear weight must have rank two, got rank {rank}")
            }
            ShapeError::ModelWidths { query, key, value } => write!(
                f, "Q/K/V model widths must match, got query {query}, key {key}, value {value}"),
            ShapeError::HeadWidths { query, key, value } => write!(
                f, "Q/K/V head widths must match, got query {query}, key {key}, value {value}"),
            ShapeError::InputRank { rank } => write!(
                f, "Q/K/V input must have rank three [batch, tokens, model_width], got rank {rank}"),
            ShapeError::InputWidth { expected, actual } => write!(
                f, "Q/K/V input final width must equal model width {expected}, got {actual}"),
            ShapeError::GradientShape { branch, expected, actual } => write!(
                f, "{branch} upstream gradient must have shape {expected:?}, got {actual:?}"),
        }
    }
}

/// The three weights, each `[d_model, d_head]`, checked to fit together.
#[derive(Clone, Debug)]
pub struct QkvProjections {
    weights: [Tensor; 3],
    d_model: usize,
    d_head: usize,
}

/// `query`, `key`, `value`, each `[batch, tokens, d_head]`.
pub struct Forward {
    pub query: Tensor,
    pub key: Tensor,
    pub value: Tensor,
}

/// `grad_input` `[batch, tokens, d_model]` and the three `[d_model, d_head]` weight gradients.
pub struct Gradients {
    pub grad_input: Tensor,
    pub grad_w_query: Tensor,
    pub grad_w_key: Tensor,
    pub grad_w_value: Tensor,
}

impl QkvProjections {
    /// The layer with these weights. Errors, first failing check wins: a weight whose rank
    /// is not 2 (query, key, value in turn), model widths (rows) that differ, head widths
    /// (columns) that differ.
    pub fn new(w_query: Tensor, w_key: Tensor, w_value: Tensor) -> Result<Self, ShapeError> {
        let weights = [w_query, w_key, w_value];
        for (branch, weight) in BRANCHES.iter().zip(&weights) {
            if weight.shape.len() != 2 {
                return Err(ShapeError::WeightRank { branch, rank: weight.shape.len() });
            }
        }
        let [rows_q, rows_k, rows_v] = [0, 1, 2].map(|i| weights[i].shape[0]);
        if rows_q != rows_k || rows_q != rows_v {
            return Err(ShapeError::ModelWidths { query: rows_q, key: rows_k, value: rows_v });
        }
        let [cols_q, cols_k, cols_v] = [0, 1, 2].map(|i| weights[i].shape[1]);
        if cols_q != cols_k || cols_q != cols_v {
            return Err(ShapeError::HeadWidths { query: cols_q, key: cols_k, value: cols_v });
        }
        Ok(QkvProjections { weights, d_model: rows_q, d_head: cols_q })
    }

    /// `(batch, tokens)` of a valid input. Errors: rank not 3, last axis not `d_model`.
    fn check_input(&self, x: &Tensor) -> Result<(usize, usize), ShapeError> {
        if x.shape.len() != 3 {
            return Err(ShapeError::InputRank { rank: x.shape.len() });
        }
        if x.shape[2] != self.d_model {
            return Err(ShapeError::InputWidth { expected: self.d_model, actual: x.shape[2] });
        }
        Ok((x.shape[0], x.shape[1]))
    }

    /// `Q = X W_Q`, `K = X W_K`, `V = X W_V`. Errors: see [`QkvProjections::check_input`].
    pub fn forward(&self, x: &Tensor) -> Result<Forward, ShapeError> {
        let (batch, tokens) = self.check_input(x)?;
        let rows = batch * tokens;
        let project = |weight: &Tensor| Tensor {
            shape: vec![batch, tokens, self.d_head],
            // [B*T, d_model] @ [d_model, d_head] -> [B*T, d_head]
            values: matmul(&x.values, &weight.values, rows, self.d_model, self.d_head),
        };
        let [w_query, w_key, w_value] = &self.weights;
        Ok(Forward { query: project(w_query), key: project(w_key), value: project(w_value) })
    }

    /// The gradients for upstream `dQ`, `dK`, `dV` (each `[batch, tokens, d_head]`).
    /// Errors: the input's (as for forward), then an upstream gradient of another shape.
    pub fn backward(&self, x: &Tensor, grad_query: &Tensor, grad_key: &Tensor,
                    grad_value: &Tensor) -> Result<Gradients, ShapeError> {
        let (batch, tokens) = self.check_input(x)?;
        let expected = vec![batch, tokens, self.d_head];
        let upstream = [grad_query, grad_key, grad_value];
        for (branch, grad) in BRANCHES.iter().zip(upstream) {
            if grad.shape != expected {
                return Err(ShapeError::GradientShape {
                    branch, expected: expected.clone(), actual: grad.shape.clone() });
            }
        }
        let rows = batch * tokens;
        // The input is shared: each branch's path adds into the same dX.
        let mut grad_input = vec![0.0; rows * self.d_model];
        let mut weight_grads = Vec::with_capacity(3);
        for (grad, weight) in upstream.iter().zip(&self.weights) {
            // [B*T, d_head] @ [d_head, d_model] -> [B*T, d_model]
            let path = matmul_transposed_right(&grad.values, &weight.values, rows, self.d_head,
                                               self.d_model);
            for (total, part) in grad_input.iter_mut().zip(path) {
                *total += part;
            }
            // [d_model, B*T] @ [B*T, d_head] -> [d_model, d_head]: this branch's only.
            weight_grads.push(Tensor {
                shape: vec![self.d_model, self.d_head],
                values: matmul_transposed_left(&x.values, &grad.values, rows, self.d_model,
                                               self.d_head),
            });
        }
        let grad_w_value = weight_grads.pop().expect("three branches");
        let grad_w_key = weight_grads.pop().expect("three branches");
        let grad_w_query = weight_grads.pop().expect("three branches");
        Ok(Gradients {
            grad_input: Tensor { shape: vec![batch, tokens, self.d_model], values: grad_input },
            grad_w_query, grad_w_key, grad_w_value,
        })
    }
}

//! A row-major float64 tensor and the three matrix products the projections need.

/// `values` in row-major (C) order: the last index moves fastest, so element
/// `[b, t, j]` of a `[batch, tokens, width]` tensor is `values[(b * tokens + t) * width + j]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub values: Vec<f64>,
}

impl Tensor {
    /// A tensor of `shape` holding `values`; `Err` when their counts differ.
    pub fn new(shape: Vec<usize>, values: Vec<f64>) -> Result<Tensor, String> {
        let size: usize = shape.iter().product();
        if size != values.len() {
            return Err(format!("{} values for shape {:?} ({} expected)", values.len(), shape, size));
        }
        Ok(Tensor { shape, values })
    }
}

/// `a @ b`: `a` is `[rows, inner]`, `b` is `[inner, cols]`; gives `[rows, cols]`.
pub fn matmul(a: &[f64], b: &[f64], rows: usize, inner: usize, cols: usize) -> Vec<f64> {
    let mut out = vec![0.0; rows * cols];
    for i in 0..rows {
        for j in 0..cols {
            let mut total = 0.0;
            for k in 0..inner {
                total += a[i * inner + k] * b[k * cols + j];
            }
            out[i * cols + j] = total;
        }
    }
    out
}

/// `a @ b^T`: `a` is `[rows, inner]`, `b` is `[cols, inner]`; gives `[rows, cols]`.
pub fn matmul_transposed_right(a: &[f64], b: &[f64], rows: usize, inner: usize, cols: usize) -> Vec<f64> {
    let mut out = vec![0.0; rows * cols];
    for i in 0..rows {
        for j in 0..cols {
            let mut total = 0.0;
            for k in 0..inner {
                total += a[i * inner + k] * b[j * inner + k];
            }
            out[i * cols + j] = total;
        }
    }
    out
}

/// `a^T @ b`: `a` is `[inner, rows]`, `b` is `[inner, cols]`; gives `[rows, cols]`.
/// With `inner == 0` (an empty batch) every entry is `0.0`.
pub fn matmul_transposed_left(a: &[f64], b: &[f64], inner: usize, rows: usize, cols: usize) -> Vec<f64> {
    let mut out = vec![0.0; rows * cols];
    for i in 0..rows {
        for j in 0..cols {
            let mut total = 0.0;
            for k in 0..inner {
                total += a[k * rows + i] * b[k * cols + j];
            }
            out[i * cols + j] = total;
        }
    }
    out
}

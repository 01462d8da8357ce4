//! Wrapping an existing layer for the protocol: the one file to rewrite for your own type.
//!
//! `QkvProjections` (projections.rs) stands for the type you already have. The protocol
//! only needs [`Projections`]: build the layer from three weights, run forward, run
//! backward, on [`Tensor`]s (shape plus row-major values). Convert to and from your own
//! tensor type here, and turn your error type into a message with `to_string()`.

use crate::projections::QkvProjections;
use crate::protocol::Projections;
use crate::tensor::Tensor;

impl Projections for QkvProjections {
    fn from_weights(w_query: Tensor, w_key: Tensor, w_value: Tensor) -> Result<Self, String> {
        QkvProjections::new(w_query, w_key, w_value).map_err(|error| error.to_string())
    }

    fn forward(&self, input: &Tensor) -> Result<[Tensor; 3], String> {
        let out = QkvProjections::forward(self, input).map_err(|error| error.to_string())?;
        Ok([out.query, out.key, out.value])
    }

    fn backward(&self, input: &Tensor, upstream: [&Tensor; 3]) -> Result<[Tensor; 4], String> {
        let [grad_query, grad_key, grad_value] = upstream;
        let grads = QkvProjections::backward(self, input, grad_query, grad_key, grad_value)
            .map_err(|error| error.to_string())?;
        Ok([grads.grad_input, grads.grad_w_query, grads.grad_w_key, grads.grad_w_value])
    }
}

/// WRONG on purpose (`--wrong value-uses-key-weight`): a copy-paste slip builds the value
/// branch from `W_K`, to show what `qkv check` says ("value equals X W_K").
pub struct ValueUsesKeyWeight(QkvProjections);

impl Projections for ValueUsesKeyWeight {
    fn from_weights(w_query: Tensor, w_key: Tensor, _w_value: Tensor) -> Result<Self, String> {
        let slip = w_key.clone();
        QkvProjections::from_weights(w_query, w_key, slip).map(ValueUsesKeyWeight)
    }

    fn forward(&self, input: &Tensor) -> Result<[Tensor; 3], String> {
        Projections::forward(&self.0, input)
    }

    fn backward(&self, input: &Tensor, upstream: [&Tensor; 3]) -> Result<[Tensor; 4], String> {
        Projections::backward(&self.0, input, upstream)
    }
}

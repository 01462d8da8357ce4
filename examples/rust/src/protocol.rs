//! The `qkv check --command` protocol, version 1 (docs/protocol.md): one JSON object per
//! line on stdin, one reply per line on stdout, nothing else on stdout.
//!
//! The loop knows nothing about how the projections are computed: it turns requests into
//! [`Tensor`]s, calls a [`Projections`], and turns the results back into JSON.

use std::io::{BufRead, Write};

use crate::head;
use crate::json::{self, Json};
use crate::rope_mha;
use crate::tensor::Tensor;

/// What the protocol needs of a layer. Implement it for your own type (see `wrap.rs`);
/// errors are plain messages, sent back as `{"id": n, "error": "..."}`.
pub trait Projections: Sized {
    /// The layer for one request's weights, each `[d_model, d_head]`.
    fn from_weights(w_query: Tensor, w_key: Tensor, w_value: Tensor) -> Result<Self, String>;
    /// `[query, key, value]` for an input `[batch, tokens, d_model]`.
    fn forward(&self, input: &Tensor) -> Result<[Tensor; 3], String>;
    /// `[grad_input, grad_w_query, grad_w_key, grad_w_value]` for the upstream
    /// `[grad_query, grad_key, grad_value]`.
    fn backward(&self, input: &Tensor, upstream: [&Tensor; 3]) -> Result<[Tensor; 4], String>;
}

/// The operations this program answers, announced in the hello reply; each is one arm in
/// [`answer`]. The head ones run [`crate::head`] on the same layer.
pub const OPS: [&str; 8] = ["forward", "backward", "head_forward", "head_backward", "rope",
                           "rope_reverse", "mha_forward", "mha_backward"];

const VERSION: u64 = 1;
const FORWARD_NAMES: [&str; 3] = ["query", "key", "value"];
const HEAD_FORWARD_NAMES: [&str; 3] = ["scores", "weights", "output"];
const BACKWARD_NAMES: [&str; 4] = ["grad_input", "grad_w_query", "grad_w_key", "grad_w_value"];

/// Answer every request line of `input` on `output` until `bye` or the end of input.
/// `Err` when a line cannot be read or is not a request at all (qkv never sends one).
pub fn serve<P: Projections>(input: impl BufRead, mut output: impl Write) -> Result<(), String> {
    for line in input.lines() {
        let line = line.map_err(|error| format!("reading stdin: {error}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let request = json::parse(&line).map_err(|error| format!("a request is not JSON: {error}"))?;
        let id = request.get("id").ok_or("a request without \"id\"")?;
        // Echoed as an integer (`3`, not `3.0`): every number reads as an f64.
        let id = id.as_usize().map_or_else(|| id.clone(), |n| Json::Integer(n as u64));
        let op = request.get("op").and_then(Json::as_str).unwrap_or("");
        let body = answer::<P>(op, &request);
        let mut members = vec![("id".to_string(), id)];
        let reply = match body {
            Ok(fields) => {
                members.extend(fields);
                // A result that overflowed to infinity cannot be written as JSON: say so.
                json::write(&Json::Object(members.clone())).or_else(|error| {
                    members.truncate(1);
                    members.push(("error".into(), Json::String(format!("a result overflowed: {error}"))));
                    json::write(&Json::Object(members))
                })?
            }
            Err(message) => {
                members.push(("error".into(), Json::String(message)));
                json::write(&Json::Object(members))?
            }
        };
        // One line, flushed: qkv waits for it before sending the next request.
        writeln!(output, "{reply}").and_then(|()| output.flush())
            .map_err(|error| format!("writing stdout: {error}"))?;
        if op == "bye" {
            return Ok(());
        }
    }
    Ok(())
}

/// The reply's members after `"id"`, or the message of an `"error"` reply.
fn answer<P: Projections>(op: &str, request: &Json) -> Result<Vec<(String, Json)>, String> {
    match op {
        "hello" => Ok(vec![
            ("version".into(), Json::Integer(VERSION)),
            ("ops".into(), Json::Array(OPS.iter().map(|op| Json::String(op.to_string())).collect())),
        ]),
        "bye" => Ok(vec![]),
        "forward" => {
            let layer = layer::<P>(request)?;
            let outputs = layer.forward(&tensor(request, "input")?)?;
            Ok(named(&FORWARD_NAMES, outputs))
        }
        "backward" => {
            let layer = layer::<P>(request)?;
            let input = tensor(request, "input")?;
            let upstream = [tensor(request, "grad_query")?, tensor(request, "grad_key")?,
                            tensor(request, "grad_value")?];
            let [query, key, value] = &upstream;
            Ok(named(&BACKWARD_NAMES, layer.backward(&input, [query, key, value])?))
        }
        "head_forward" => {
            let layer = layer::<P>(request)?;
            let outputs = head::head_forward(&layer, &tensor(request, "input")?, causal(request)?)?;
            Ok(named(&HEAD_FORWARD_NAMES, outputs))
        }
        "head_backward" => {
            let layer = layer::<P>(request)?;
            let grads = head::head_backward(&layer, &tensor(request, "input")?, causal(request)?,
                                            &tensor(request, "grad_output")?)?;
            Ok(named(&BACKWARD_NAMES, grads))
        }
        "rope" | "rope_reverse" => {
            let x = tensor(request, "input")?;
            if x.shape.len() < 2 {
                return Err(format!("RoPE needs [..., tokens, width], got rank {}", x.shape.len()));
            }
            let (tokens, width) = (x.shape[x.shape.len() - 2], x.shape[x.shape.len() - 1]);
            let rope = rope_settings(request)?;
            rope_mha::check_rope(width, rope.base)?;
            let sign = if op == "rope" { 1.0 } else { -1.0 };
            let turned = Tensor::new(x.shape.clone(), rope_mha::turn(&x.values, tokens, width, rope, sign))?;
            let name = if op == "rope" { "rotated" } else { "turned_back" };
            Ok(vec![(name.into(), tensor_json(turned))])
        }
        "mha_forward" => {
            let layer = multi_head(request)?;
            Ok(named(&MHA_FORWARD_NAMES, layer.forward(&tensor(request, "input")?, flag(request, "causal")?)?))
        }
        "mha_backward" => {
            let layer = multi_head(request)?;
            let grads = layer.backward(&tensor(request, "input")?, flag(request, "causal")?,
                                       &tensor(request, "grad_output")?)?;
            Ok(named(&MHA_BACKWARD_NAMES, grads))
        }
        other => Err(format!("unknown op {other:?}")),
    }
}

const MHA_FORWARD_NAMES: [&str; 3] = ["weights", "merged", "output"];
const MHA_BACKWARD_NAMES: [&str; 5] = ["grad_input", "grad_w_query", "grad_w_key", "grad_w_value",
                                       "grad_w_output"];

/// `request["base"]` and `request["offset"]` (a non-negative integer).
fn rope_settings(request: &Json) -> Result<rope_mha::Rope, String> {
    let base = request.get("base").and_then(Json::as_f64).ok_or("\"base\" must be a number")?;
    let offset = request.get("offset").and_then(Json::as_usize)
        .ok_or("\"offset\" must be an integer, 0 or more")?;
    Ok(rope_mha::Rope { base, offset })
}

/// The multi-head layer a request describes (RoPE when `"rope"` is true).
fn multi_head(request: &Json) -> Result<rope_mha::MultiHead, String> {
    let weights = [tensor(request, "w_query")?, tensor(request, "w_key")?, tensor(request, "w_value")?,
                   tensor(request, "w_output")?];
    let heads = request.get("heads").and_then(Json::as_usize).ok_or("\"heads\" must be an integer")?;
    let rope = if flag(request, "rope")? { Some(rope_settings(request)?) } else { None };
    rope_mha::MultiHead::new(weights, heads, rope)
}

/// `request[key]`, which must be `true` or `false`.
fn flag(request: &Json, key: &str) -> Result<bool, String> {
    match request.get(key) {
        Some(Json::Bool(value)) => Ok(*value),
        _ => Err(format!("\"{key}\" must be true or false")),
    }
}

/// `request["causal"]`, which must be `true` or `false`.
fn causal(request: &Json) -> Result<bool, String> {
    match request.get("causal") {
        Some(Json::Bool(flag)) => Ok(*flag),
        _ => Err("\"causal\" must be true or false".into()),
    }
}

fn layer<P: Projections>(request: &Json) -> Result<P, String> {
    P::from_weights(tensor(request, "w_query")?, tensor(request, "w_key")?,
                    tensor(request, "w_value")?)
}

fn named<const N: usize>(names: &[&str; N], tensors: [Tensor; N]) -> Vec<(String, Json)> {
    names.iter().zip(tensors).map(|(name, t)| (name.to_string(), tensor_json(t))).collect()
}

/// `request[key]`, a `{"shape": [...], "values": [...]}` object, as a [`Tensor`].
fn tensor(request: &Json, key: &str) -> Result<Tensor, String> {
    let t = request.get(key).ok_or_else(|| format!("missing \"{key}\""))?;
    let shape = t.get("shape").and_then(Json::as_array)
        .ok_or_else(|| format!("\"{key}.shape\" must be a list"))?
        .iter().map(|dim| dim.as_usize().ok_or_else(|| format!("\"{key}.shape\" holds a non-integer")))
        .collect::<Result<Vec<usize>, String>>()?;
    let values = t.get("values").and_then(Json::as_array)
        .ok_or_else(|| format!("\"{key}.values\" must be a list"))?
        .iter().map(|v| v.as_f64().ok_or_else(|| format!("\"{key}.values\" holds a non-number")))
        .collect::<Result<Vec<f64>, String>>()?;
    Tensor::new(shape, values).map_err(|error| format!("\"{key}\": {error}"))
}

fn tensor_json(t: Tensor) -> Json {
    Json::Object(vec![
        ("shape".into(), Json::Array(t.shape.iter().map(|&d| Json::Integer(d as u64)).collect())),
        ("values".into(), Json::Array(t.values.into_iter().map(Json::Number).collect())),
    ])
}

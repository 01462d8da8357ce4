#!/usr/bin/env node
// Q/K/V projections, an attention head, RoPE and multi-head attention for `qkv check
// --command`, Node.js with no npm packages.
//
//     qkv check --command "node examples/node/qkv_projections.js"
//
// Reading uses JSON.parse (correctly rounded). Writing does NOT use JSON.stringify for
// numbers: it turns -0 into "0" and NaN or Infinity into "null". formatNumber below keeps
// the sign of zero and refuses what JSON cannot hold; every other number is written by
// String(x), ECMAScript's shortest decimal that reads back to the same double.
"use strict";

const readline = require("node:readline");

const BRANCHES = ["query", "key", "value"]; // branch order everywhere

// --- the layer: knows nothing about JSON or the protocol ------------------------------

// Tensors are {shape: [...], values: [...]}, values row-major: element [b, t, j] of
// [B, T, D] is values[(b * T + t) * D + j].

/** a @ b: a is [rows, inner], b is [inner, cols]; gives [rows, cols]. */
function matmul(a, b, rows, inner, cols) {
  const out = new Array(rows * cols);
  for (let i = 0; i < rows; i++) {
    for (let j = 0; j < cols; j++) {
      let total = 0.0;
      for (let k = 0; k < inner; k++) total += a[i * inner + k] * b[k * cols + j];
      out[i * cols + j] = total;
    }
  }
  return out;
}

/** a @ b^T: a is [rows, inner], b is [cols, inner]; gives [rows, cols]. */
function matmulTransposedRight(a, b, rows, inner, cols) {
  const out = new Array(rows * cols);
  for (let i = 0; i < rows; i++) {
    for (let j = 0; j < cols; j++) {
      let total = 0.0;
      for (let k = 0; k < inner; k++) total += a[i * inner + k] * b[j * inner + k];
      out[i * cols + j] = total;
    }
  }
  return out;
}

/** a^T @ b: a is [inner, rows], b is [inner, cols]; gives [rows, cols] (zeros if inner is 0). */
function matmulTransposedLeft(a, b, inner, rows, cols) {
  const out = new Array(rows * cols);
  for (let i = 0; i < rows; i++) {
    for (let j = 0; j < cols; j++) {
      let total = 0.0;
      for (let k = 0; k < inner; k++) total += a[k * rows + i] * b[k * cols + j];
      out[i * cols + j] = total;
    }
  }
  return out;
}

/** A rejected weight, input or upstream gradient; the message says which and why. */
class ShapeError extends Error {}

const sameShape = (a, b) => a.length === b.length && a.every((dim, i) => dim === b[i]);

class QkvProjections {
  /**
   * The layer with weights {shape: [d_model, d_head], values}. Throws ShapeError, first
   * failing check wins: a weight of rank other than 2, model widths (rows) that differ,
   * head widths (columns) that differ.
   */
  constructor(wQuery, wKey, wValue) {
    this.weights = [wQuery, wKey, wValue];
    this.weights.forEach((w, i) => {
      if (w.shape.length !== 2) {
        throw new ShapeError(`${BRANCHES[i]} projection: linear weight must have rank two, ` +
                             `got rank ${w.shape.length}`);
      }
    });
    const [rows, cols] = [0, 1].map((axis) => this.weights.map((w) => w.shape[axis]));
    if (rows[1] !== rows[0] || rows[2] !== rows[0]) {
      throw new ShapeError(`Q/K/V model widths must match, got query ${rows[0]}, ` +
                           `key ${rows[1]}, value ${rows[2]}`);
    }
    if (cols[1] !== cols[0] || cols[2] !== cols[0]) {
      throw new ShapeError(`Q/K/V head widths must match, got query ${cols[0]}, ` +
                           `key ${cols[1]}, value ${cols[2]}`);
    }
    this.dModel = rows[0];
    this.dHead = cols[0];
  }

  /** [batch, tokens] of a valid input; throws ShapeError for rank != 3 or a wrong width. */
  checkInput(x) {
    if (x.shape.length !== 3) {
      throw new ShapeError("Q/K/V input must have rank three [batch, tokens, model_width], " +
                           `got rank ${x.shape.length}`);
    }
    if (x.shape[2] !== this.dModel) {
      throw new ShapeError(`Q/K/V input final width must equal model width ${this.dModel}, ` +
                           `got ${x.shape[2]}`);
    }
    return [x.shape[0], x.shape[1]];
  }

  /** {query, key, value}: Q = X W_Q, K = X W_K, V = X W_V. Throws ShapeError. */
  forward(x) {
    const [batch, tokens] = this.checkInput(x);
    const [query, key, value] = this.weights.map((w) => ({
      shape: [batch, tokens, this.dHead],
      // [B*T, d_model] @ [d_model, d_head] -> [B*T, d_head]
      values: matmul(x.values, w.values, batch * tokens, this.dModel, this.dHead),
    }));
    return { query, key, value };
  }

  /**
   * {grad_input, grad_w_query, grad_w_key, grad_w_value} for upstream gradients
   * [B, T, d_head]. Throws ShapeError (the input's, then an upstream of another shape).
   */
  backward(x, gradQuery, gradKey, gradValue) {
    const [batch, tokens] = this.checkInput(x);
    const upstream = [gradQuery, gradKey, gradValue];
    const expected = [batch, tokens, this.dHead];
    upstream.forEach((g, i) => {
      if (!sameShape(g.shape, expected)) {
        throw new ShapeError(`${BRANCHES[i]} upstream gradient must have shape ` +
                             `[${expected}], got [${g.shape}]`);
      }
    });
    const rows = batch * tokens;
    // The input is shared: each branch's path adds into the same dX.
    const gradInput = new Array(rows * this.dModel).fill(0.0);
    const weightGrads = upstream.map((g, i) => {
      // [B*T, d_head] @ [d_head, d_model] -> [B*T, d_model]
      const path = this.inputPath(g, i, rows);
      path.forEach((part, n) => { gradInput[n] += part; });
      // [d_model, B*T] @ [B*T, d_head] -> [d_model, d_head]: this branch's only.
      return { shape: [this.dModel, this.dHead],
               values: matmulTransposedLeft(x.values, g.values, rows, this.dModel, this.dHead) };
    });
    return {
      grad_input: { shape: [batch, tokens, this.dModel], values: gradInput },
      grad_w_query: weightGrads[0], grad_w_key: weightGrads[1], grad_w_value: weightGrads[2],
    };
  }

  /** dY W^T for branch `i`: its path into the shared input's gradient. */
  inputPath(grad, i, rows) {
    return matmulTransposedRight(grad.values, this.weights[i].values, rows, this.dHead, this.dModel);
  }
}

/** WRONG on purpose (--wrong no-value-path): dX forgets the value path, to show what qkv says. */
class NoValuePath extends QkvProjections {
  inputPath(grad, i, rows) {
    const path = super.inputPath(grad, i, rows);
    return BRANCHES[i] === "value" ? path.map(() => 0.0) : path;
  }
}

// --- an attention head on the projections (chapter 27) ---------------------------------

/**
 * One head: scores = Q K^T / sqrt(d_k) [B,T,T] (before the mask), weights = the row
 * softmax of the masked scores (row max subtracted: large scores cannot overflow),
 * output = weights V. `rowSum` false is WRONG on purpose (--wrong head-no-rowsum): the
 * softmax backward without its row-sum term.
 */
class AttentionHead {
  constructor(layer, rowSum = true) {
    this.layer = layer;
    this.rowSum = rowSum;
  }

  /** Every intermediate of a forward pass, per batch item b: row-major [T, T] or [T, d]. */
  run(x, causal) {
    const [batch, tokens] = this.layer.checkInput(x);
    const d = this.layer.dHead;
    const { query, key, value } = this.layer.forward(x);
    const scale = Math.sqrt(d);
    const scores = [], weights = [], output = [];
    for (let b = 0; b < batch; b++) {
      const slice = (t) => t.values.slice(b * tokens * d, (b + 1) * tokens * d);
      // [T, d] @ [T, d]^T -> [T, T], scaled
      const s = matmulTransposedRight(slice(query), slice(key), tokens, d, tokens).map((v) => v / scale);
      const a = new Array(tokens * tokens).fill(0.0);
      for (let i = 0; i < tokens; i++) {
        const last = causal ? i : tokens - 1; // causal: key positions after i are masked out
        let max = -Infinity;
        for (let j = 0; j <= last; j++) max = Math.max(max, s[i * tokens + j]);
        let total = 0.0;
        for (let j = 0; j <= last; j++) { a[i * tokens + j] = Math.exp(s[i * tokens + j] - max); total += a[i * tokens + j]; }
        for (let j = 0; j <= last; j++) a[i * tokens + j] /= total;
      }
      scores.push(...s);
      weights.push(...a);
      output.push(...matmul(a, slice(value), tokens, tokens, d)); // [T, T] @ [T, d]
    }
    return { batch, tokens, d, query, key, value, scores, weights, output };
  }

  forward(x, causal) {
    const r = this.run(x, causal);
    return { scores: { shape: [r.batch, r.tokens, r.tokens], values: r.scores },
             weights: { shape: [r.batch, r.tokens, r.tokens], values: r.weights },
             output: { shape: [r.batch, r.tokens, r.d], values: r.output } };
  }

  /** The four gradients for grad_output [B, T, d_head]; throws ShapeError. */
  backward(x, causal, gradOutput) {
    const r = this.run(x, causal);
    const { batch, tokens, d } = r;
    if (!sameShape(gradOutput.shape, [batch, tokens, d])) {
      throw new ShapeError(`grad_output must have shape [${[batch, tokens, d]}], got [${gradOutput.shape}]`);
    }
    const grads = [[], [], []]; // dQ, dK, dV
    for (let b = 0; b < batch; b++) {
      const at = (values) => values.slice(b * tokens * d, (b + 1) * tokens * d);
      const a = r.weights.slice(b * tokens * tokens, (b + 1) * tokens * tokens);
      const dO = at(gradOutput.values);
      const dA = matmulTransposedRight(dO, at(r.value.values), tokens, d, tokens); // dO V^T
      const dV = matmulTransposedLeft(a, dO, tokens, tokens, d); // A^T dO
      const dS = new Array(tokens * tokens);
      for (let i = 0; i < tokens; i++) {
        let rowSum = 0.0;
        for (let j = 0; j < tokens; j++) rowSum += dA[i * tokens + j] * a[i * tokens + j];
        if (!this.rowSum) rowSum = 0.0;
        for (let j = 0; j < tokens; j++) dS[i * tokens + j] = a[i * tokens + j] * (dA[i * tokens + j] - rowSum) / Math.sqrt(d);
      }
      grads[0].push(...matmul(dS, at(r.key.values), tokens, tokens, d)); // dS K
      grads[1].push(...matmulTransposedLeft(dS, at(r.query.values), tokens, tokens, d)); // dS^T Q
      grads[2].push(...dV);
    }
    const shape = [batch, tokens, d];
    const [gq, gk, gv] = grads.map((values) => ({ shape, values }));
    return this.layer.backward(x, gq, gk, gv);
  }
}

// --- RoPE (chapter 29) and multi-head attention (chapter 30) ---------------------------

/**
 * Turn the adjacent pairs (2i, 2i+1) of each row of values (rows of `width`, `tokens`
 * rows per sequence) by (offset + t) * base^(-2i/width); sign -1 turns back. `halfSplit`
 * pairs i with i + width/2 instead (the --wrong rope-half-split slip).
 */
function turn(values, tokens, width, base, offset, sign, halfSplit = false) {
  const out = values.slice();
  const rows = tokens ? values.length / width : 0;
  for (let row = 0; row < rows; row++) {
    const position = offset + (row % tokens);
    for (let i = 0; i < width / 2; i++) {
      const angle = position * Math.pow(base, (-2 * i) / width);
      const cos = Math.cos(angle);
      const sin = sign * Math.sin(angle);
      const [a, b] = halfSplit ? [i, i + width / 2] : [2 * i, 2 * i + 1];
      const x = values[row * width + a];
      const y = values[row * width + b];
      out[row * width + a] = x * cos - y * sin;
      out[row * width + b] = y * cos + x * sin;
    }
  }
  return out;
}

/** The RoPE request's checks: a token axis, an even non-zero width, a positive base, an
 * offset of 0 or more. Throws ShapeError. */
function checkRope(shape, base, offset) {
  if (shape.length < 2) throw new ShapeError(`RoPE needs [..., tokens, width], got rank ${shape.length}`);
  const width = shape[shape.length - 1];
  if (width === 0 || width % 2) throw new ShapeError(`RoPE needs an even, non-zero width, got ${width}`);
  if (typeof base !== "number" || !Number.isFinite(base) || base <= 0) {
    throw new ShapeError(`RoPE needs a positive base, got ${base}`);
  }
  if (!Number.isInteger(offset) || offset < 0) throw new ShapeError(`RoPE needs an offset of 0 or more, got ${offset}`);
}

class MultiHeadAttention {
  /**
   * Weights [d_model, d_model] (query, key, value, output), `heads` heads of width
   * d_model / heads, RoPE when `rope` (base, offset). Throws ShapeError.
   */
  constructor(weights, heads, rope, base, offset, halfSplit = false) {
    const width = weights[0].shape[0];
    weights.forEach((w) => {
      if (!sameShape(w.shape, [width, width])) {
        throw new ShapeError(`weights must be [${width},${width}], got [${w.shape}]`);
      }
    });
    if (!Number.isInteger(heads) || heads < 1 || width % heads) {
      throw new ShapeError(`${heads} heads do not divide d_model ${width}`);
    }
    if (rope) checkRope([1, width / heads], base, offset);
    Object.assign(this, { weights, heads, rope, base, offset, width, size: width / heads, halfSplit });
  }

  /** Per head of batch item b: the rows of y [B*T, width] in its columns, [T*size]. */
  column(y, b, h, tokens) {
    const out = new Array(tokens * this.size);
    for (let t = 0; t < tokens; t++) {
      for (let j = 0; j < this.size; j++) out[t * this.size + j] = y[(b * tokens + t) * this.width + h * this.size + j];
    }
    return out;
  }

  turned(values, tokens, sign) {
    return this.rope ? turn(values, tokens, this.size, this.base, this.offset, sign, this.halfSplit) : values;
  }

  /** Everything the reverse pass needs, and the reply's weights, merged, output. */
  pass(x, causal) {
    if (x.shape.length !== 3 || x.shape[2] !== this.width) {
      throw new ShapeError(`input must be [batch, tokens, ${this.width}], got [${x.shape}]`);
    }
    const [batch, tokens] = x.shape;
    const rows = batch * tokens;
    const [q, k, v] = this.weights.slice(0, 3).map((w) => matmul(x.values, w.values, rows, this.width, this.width));
    const weights = [];
    const merged = new Array(rows * this.width).fill(0);
    const heads = [];
    for (let b = 0; b < batch; b++) {
      for (let h = 0; h < this.heads; h++) {
        const qh = this.turned(this.column(q, b, h, tokens), tokens, 1);
        const kh = this.turned(this.column(k, b, h, tokens), tokens, 1);
        const vh = this.column(v, b, h, tokens);
        const scores = matmulTransposedRight(qh, kh, tokens, this.size, tokens).map((s) => s / Math.sqrt(this.size));
        const a = new Array(tokens * tokens);
        for (let t = 0; t < tokens; t++) {
          const seen = causal ? t + 1 : tokens;
          let largest = -Infinity;
          for (let u = 0; u < seen; u++) largest = Math.max(largest, scores[t * tokens + u]);
          let total = 0.0;
          for (let u = 0; u < tokens; u++) {
            a[t * tokens + u] = u < seen ? Math.exp(scores[t * tokens + u] - largest) : 0.0;
            total += a[t * tokens + u];
          }
          for (let u = 0; u < tokens; u++) a[t * tokens + u] /= total;
        }
        const o = matmul(a, vh, tokens, tokens, this.size);
        for (let t = 0; t < tokens; t++) {
          for (let j = 0; j < this.size; j++) merged[(b * tokens + t) * this.width + h * this.size + j] = o[t * this.size + j];
        }
        weights.push(...a);
        heads.push({ qh, kh, vh, a });
      }
    }
    const output = matmul(merged, this.weights[3].values, rows, this.width, this.width);
    return { batch, tokens, q, k, v, weights, merged, output, heads };
  }

  forward(x, causal) {
    const done = this.pass(x, causal);
    const { batch, tokens } = done;
    return {
      weights: { shape: [batch, this.heads, tokens, tokens], values: done.weights },
      merged: { shape: x.shape.slice(), values: done.merged },
      output: { shape: x.shape.slice(), values: done.output },
    };
  }

  backward(x, causal, gradOutput) {
    const done = this.pass(x, causal);
    const { batch, tokens } = done;
    if (!sameShape(gradOutput.shape, x.shape)) {
      throw new ShapeError(`grad_output must be [${x.shape}], got [${gradOutput.shape}]`);
    }
    const rows = batch * tokens;
    const width = this.width;
    const gradOut = matmulTransposedLeft(done.merged, gradOutput.values, rows, width, width);
    const gradMerged = matmulTransposedRight(gradOutput.values, this.weights[3].values, rows, width, width);
    const grads = [0, 1, 2].map(() => new Array(rows * width).fill(0)); // dQ, dK, dV [B*T, width]
    for (let b = 0; b < batch; b++) {
      for (let h = 0; h < this.heads; h++) {
        const { qh, kh, vh, a } = done.heads[b * this.heads + h];
        const gradO = this.column(gradMerged, b, h, tokens);
        const gradA = matmulTransposedRight(gradO, vh, tokens, this.size, tokens);
        const gradV = matmulTransposedLeft(a, gradO, tokens, tokens, this.size);
        const gradS = new Array(tokens * tokens);
        for (let t = 0; t < tokens; t++) {
          let rowSum = 0.0;
          for (let u = 0; u < tokens; u++) rowSum += gradA[t * tokens + u] * a[t * tokens + u];
          for (let u = 0; u < tokens; u++) {
            gradS[t * tokens + u] = (a[t * tokens + u] * (gradA[t * tokens + u] - rowSum)) / Math.sqrt(this.size);
          }
        }
        const gradQ = this.turned(matmul(gradS, kh, tokens, tokens, this.size), tokens, -1);
        const gradK = this.turned(matmulTransposedLeft(gradS, qh, tokens, tokens, this.size), tokens, -1);
        [gradQ, gradK, gradV].forEach((g, branch) => {
          for (let t = 0; t < tokens; t++) {
            for (let j = 0; j < this.size; j++) grads[branch][(b * tokens + t) * width + h * this.size + j] = g[t * this.size + j];
          }
        });
      }
    }
    const gradInput = new Array(rows * width).fill(0);
    grads.forEach((g, branch) => {
      const path = matmulTransposedRight(g, this.weights[branch].values, rows, width, width);
      path.forEach((value, i) => { gradInput[i] += value; });
    });
    const gradW = grads.map((g) => matmulTransposedLeft(x.values, g, rows, width, width));
    const square = (values) => ({ shape: [width, width], values });
    return {
      grad_input: { shape: x.shape.slice(), values: gradInput },
      grad_w_query: square(gradW[0]), grad_w_key: square(gradW[1]), grad_w_value: square(gradW[2]),
      grad_w_output: square(gradOut),
    };
  }
}

// --- JSON out: exact numbers -----------------------------------------------------------

class NotFinite extends Error {}

/** The shortest round-trip spelling of a double; "-0.0" for -0 (Python reads "-0" as 0). */
function formatNumber(x) {
  if (!Number.isFinite(x)) throw new NotFinite(`a result overflowed: ${x} is not a number JSON can hold`);
  if (Object.is(x, -0)) return "-0.0";
  return String(x);
}

/** One line of JSON for numbers, strings, arrays and plain objects. Throws NotFinite. */
function encode(value) {
  if (typeof value === "number") return formatNumber(value);
  if (Array.isArray(value)) return `[${value.map(encode).join(",")}]`;
  if (value !== null && typeof value === "object") {
    return `{${Object.entries(value).map(([k, v]) => `${JSON.stringify(k)}:${encode(v)}`).join(",")}}`;
  }
  return JSON.stringify(value); // strings, booleans, null
}

// --- the protocol (docs/protocol.md) ---------------------------------------------------

/** request[key] as a tensor, checked to be {shape: [...], values: [...]} of matching size. */
function tensor(request, key) {
  const t = request[key];
  if (t === null || typeof t !== "object" || !Array.isArray(t.shape) || !Array.isArray(t.values)) {
    throw new ShapeError(`"${key}" must be {"shape": [...], "values": [...]}`);
  }
  const size = t.shape.reduce((a, b) => a * b, 1);
  if (size !== t.values.length) {
    throw new ShapeError(`"${key}" has ${t.values.length} values for shape [${t.shape}]`);
  }
  return t;
}

/** request.causal, which must be a boolean. */
function causal(request) {
  if (typeof request.causal !== "boolean") throw new ShapeError('"causal" must be true or false');
  return request.causal;
}

/** One entry per operation: given the request and the layer type, the reply's fields
 * (the hello reply lists these names). */
const OPERATIONS = {
  forward(request, Layer) {
    const layer = new Layer(tensor(request, "w_query"), tensor(request, "w_key"),
                            tensor(request, "w_value"));
    return layer.forward(tensor(request, "input"));
  },
  backward(request, Layer) {
    const layer = new Layer(tensor(request, "w_query"), tensor(request, "w_key"),
                            tensor(request, "w_value"));
    return layer.backward(tensor(request, "input"), tensor(request, "grad_query"),
                          tensor(request, "grad_key"), tensor(request, "grad_value"));
  },
  head_forward(request, Layer, Head) {
    const layer = new Layer(tensor(request, "w_query"), tensor(request, "w_key"),
                            tensor(request, "w_value"));
    return new Head(layer).forward(tensor(request, "input"), causal(request));
  },
  head_backward(request, Layer, Head) {
    const layer = new Layer(tensor(request, "w_query"), tensor(request, "w_key"),
                            tensor(request, "w_value"));
    return new Head(layer).backward(tensor(request, "input"), causal(request),
                                    tensor(request, "grad_output"));
  },
  rope(request, Layer, Head, slips) {
    return { rotated: rotation(request, 1, slips) };
  },
  rope_reverse(request, Layer, Head, slips) {
    return { turned_back: rotation(request, -1, slips) };
  },
  mha_forward(request, Layer, Head, slips) {
    return multiHead(request, slips).forward(tensor(request, "input"), causal(request));
  },
  mha_backward(request, Layer, Head, slips) {
    return multiHead(request, slips).backward(tensor(request, "input"), causal(request),
                                              tensor(request, "grad_output"));
  },
};

/** The rope request's input turned (sign 1) or turned back (sign -1). */
function rotation(request, sign, slips) {
  const x = tensor(request, "input");
  checkRope(x.shape, request.base, request.offset);
  const width = x.shape[x.shape.length - 1];
  return { shape: x.shape.slice(),
           values: turn(x.values, x.shape[x.shape.length - 2], width, request.base, request.offset, sign,
                        slips.has("rope-half-split")) };
}

/** The layer a multi-head request describes. Throws ShapeError. */
function multiHead(request, slips) {
  if (typeof request.rope !== "boolean") throw new ShapeError('"rope" must be true or false');
  const weights = ["w_query", "w_key", "w_value", "w_output"].map((key) => tensor(request, key));
  return new MultiHeadAttention(weights, request.heads, request.rope, request.base, request.offset,
                                slips.has("rope-half-split"));
}

/** The reply line (without newline) to one request. */
function answer(request, Layer, Head = AttentionHead, slips = new Set()) {
  const id = request.id;
  if (request.op === "hello") return encode({ id, version: 1, ops: Object.keys(OPERATIONS) });
  if (request.op === "bye") return encode({ id });
  const operation = Object.hasOwn(OPERATIONS, request.op) ? OPERATIONS[request.op] : null;
  if (operation === null) return encode({ id, error: `unknown op ${JSON.stringify(request.op)}` });
  try {
    return encode({ id, ...operation(request, Layer, Head, slips) });
  } catch (error) {
    // An invalid input, or a result that overflowed: say so rather than crash.
    if (error instanceof ShapeError || error instanceof NotFinite) {
      return encode({ id, error: error.message });
    }
    throw error;
  }
}

async function main(argv) {
  class HeadNoRowSum extends AttentionHead {
    constructor(layer) { super(layer, false); }
  }
  const layers = { "": [QkvProjections, AttentionHead], "no-value-path": [NoValuePath, AttentionHead],
                   "head-no-rowsum": [QkvProjections, HeadNoRowSum],
                   "rope-half-split": [QkvProjections, AttentionHead, new Set(["rope-half-split"])] };
  const wrong = argv[0] === "--wrong" && argv.length === 2 ? argv[1] : argv.length ? null : "";
  if (!Object.hasOwn(layers, wrong)) {
    process.stderr.write("usage: node qkv_projections.js [--wrong no-value-path|head-no-rowsum|rope-half-split]\n");
    process.exitCode = 2;
    return;
  }
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (line.trim() === "") continue;
    const request = JSON.parse(line);
    // One line per reply; writes to a pipe are synchronous on Linux, and the process
    // does not end before stdout has drained either way.
    process.stdout.write(answer(request, ...layers[wrong]) + "\n");
    if (request.op === "bye") break;
  }
  lines.close();
  process.stdin.destroy(); // bye: exit without waiting for the end of input
}

if (require.main === module) {
  main(process.argv.slice(2)).catch((error) => {
    process.stderr.write(`qkv_projections.js: ${error.stack || error}\n`);
    process.exitCode = 1;
  });
}

module.exports = { QkvProjections, NoValuePath, AttentionHead, MultiHeadAttention, turn, ShapeError,
                   formatNumber, encode, answer };

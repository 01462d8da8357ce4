"""The "predict before reading" questions of chapters 27 to 30 and 37, each answer computed by qkv's engine.

Each chapter's text asks the learner to predict something about its worked example
before running it: which value row each query favours (27), which cells the causal
mask keeps (28), what a rotation does to a dot product (29), every shape of a
multi-head layer and where its heads first mix (30), what a layer's KV cache keeps,
reads and refuses (37). The questions here are those predictions, in qkv's words. Their
inputs are the chapters' worked examples (27, 28 and 37: the bundled fixtures; 29 and
30: the numbers the text gives), and every numeric answer is computed by running qkv:
the chapters' evidence (:mod:`qkvcli.chapters`), the engine
(:mod:`qkvcli.attention.engine`), RoPE (:mod:`qkvcli.attention.maths`) and the KV cache
(:mod:`qkvcli.attention.cache`: chapter 37's yes/no answers are what running the cache
did, a step taken or its typed refusal caught). The conceptual questions' answers are
the texts' own. A question is a
:class:`~qkvcli.learn.quiz.Question`, marked by :func:`~qkvcli.learn.quiz.check_answer`.
"""

from __future__ import annotations

import json
import math

import numpy as np

from qkvcli.attention import engine
from qkvcli.attention.errors import HeadCountMismatch
from qkvcli.attention.head import AttentionHead
from qkvcli.attention.maths import rotate
from qkvcli.attention.multihead import MultiHeadLayer
from qkvcli.core.arrays import Array
from qkvcli.core.rope import Rope, inverse_frequencies
from qkvcli.learn.quiz import LETTERS, Question, listed

CHAPTERS = (27, 28, 29, 30, 37)
"""The chapters with a quiz here (26's is :func:`~qkvcli.learn.quiz.build_questions`)."""


def _g(value: float) -> str:
    return "0" if value == 0 else f"{value:.6g}"


def _vec(values: object) -> str:
    return "[" + ",".join(_g(float(v)) for v in np.asarray(values).reshape(-1)) + "]"


def _mat(values: object) -> str:
    return "[" + ",".join(_vec(row) for row in np.asarray(values)) + "]"


def _numbers(values: object) -> tuple[float, ...]:
    return tuple(float(v) for v in np.asarray(values, dtype=np.float64).reshape(-1))


def _bundled_fixture(number: int) -> object:
    """A chapter's bundled fixture, parsed by the chapter's reader."""
    from qkvcli.chapters.registry import chapter_of
    from qkvcli.reading.limits import DEFAULT_MAX_ELEMENTS
    from qkvcli.reading.load import bundled_fixture_text

    chapter = chapter_of(number)
    return chapter.parse(json.loads(bundled_fixture_text(chapter.fixture)),
                         DEFAULT_MAX_ELEMENTS, None)


def _bundled(number: int) -> object:
    """A chapter's evidence for its bundled fixture."""
    from qkvcli.chapters.registry import chapter_of

    return chapter_of(number).build(_bundled_fixture(number))


def chapter_questions(number: int) -> tuple[Question, ...]:
    """Chapter ``number``'s questions (27 to 30, 37). Raises ``KeyError`` for another number."""
    return {27: _chapter_27, 28: _chapter_28, 29: _chapter_29, 30: _chapter_30,
            37: _chapter_37}[number]()


def _chapter_27() -> tuple[Question, ...]:
    evidence = _bundled(27)
    p = evidence.primary  # type: ignore[attr-defined]
    s = evidence.scale  # type: ignore[attr-defined]
    single = evidence.single  # type: ignore[attr-defined]
    q, k = p.query[0], p.key[0]
    favoured = _numbers(np.argmax(p.probabilities[0], axis=-1))
    tokens = q.shape[0]
    empty = evidence.empty  # type: ignore[attr-defined]
    query, _, value = evidence.operands(empty)  # type: ignore[attr-defined]
    return (
        Question(1, f"Q={_mat(q)} and K={_mat(k)} (one row per token): for each query in turn, "
                 "which key position gets the larger probability?", "numbers",
                 favoured, _vec(favoured),
                 f"The dot products are {_vec(p.scores[0])} row by row: each query favours the "
                 "key with the larger score, and scaling and the softmax keep that order.",
                 parts=tuple(f"q{i}" for i in range(tokens))),
        Question(2, "Compute the raw scores S = Q K^T, row by row (four numbers).", "numbers",
                 _numbers(p.scores[0]), _vec(p.scores[0]),
                 "Entry [i,j] is the dot product of query i with key j; every query meets "
                 "every key, nothing is masked yet.", parts=("row q0", "row q1")),
        Question(3, "A query [1,0] meets an identical key and an orthogonal one (scores 1 and 0). "
                 "Its probability on the identical key without the scale, then with "
                 f"d_k={s.d_k} and the 1/sqrt(d_k) scale?", "numbers",
                 (s.unscaled_focus, s.scaled_focus),
                 f"{_g(s.unscaled_focus)} then {_g(s.scaled_focus)}",
                 "Dividing the scores by sqrt(d_k) shrinks their gap, so the softmax is less "
                 "sharp: the scale softens this distribution.",
                 parts=("the unscaled probability", "the scaled probability")),
        Question(4, f"A single token with value {_vec(single.value)}: what is its output?",
                 "numbers", _numbers(single.output), _vec(single.output),
                 "One key takes probability 1, so the output is its value row.",
                 parts=tuple(f"o[{i}]" for i in range(single.output.size))),
        Question(5, "And does that single token's query receive a nonzero gradient? (yes/no)",
                 "yesno", "no" if single.query_gradient_zero else "yes",
                 "no" if single.query_gradient_zero else "yes",
                 "With no competing key its probability cannot move: the softmax's reverse "
                 "gives exactly zero, so neither the query nor the key gets a gradient."),
        Question(6, f"Q and K of shape {_vec(query)} and V of shape "
                 f"{_vec(value)}: the shapes of the probabilities and of the output?",
                 "numbers", _numbers([*empty.shape('weights'), *empty.shape('output')]),
                 f"{_vec(empty.shape('weights'))} and {_vec(empty.shape('output'))}",
                 "The probabilities are [B,T,T] and the output [B,T,d_v]: the output takes the "
                 "value's width, and an empty batch stays empty.",
                 parts=("the probabilities' shape", "the output's shape")),
        Question(7, "Each row of probabilities is normalised over which axis?", "choice",
                 LETTERS[1], "b) the key positions, for one fixed query",
                 "For each batch item and query i, the softmax runs over the keys j, so every "
                 "row sums to 1.",
                 choices=("the query positions, for one fixed key",
                          "the key positions, for one fixed query",
                          "every score of the batch at once")),
        Question(8, "Which pairs does each mechanism compare?", "choice", LETTERS[2],
                 "c) additive attention: decoder states with encoder annotations; "
                 "self-attention: positions of one sequence with each other",
                 "Bahdanau et al. score the decoder state against encoder annotations, two "
                 "streams; Vaswani et al.'s self-attention compares one sequence with itself.",
                 choices=("both compare positions of one sequence with each other",
                          "additive attention: one sequence; self-attention: two streams",
                          "additive attention: decoder states with encoder annotations; "
                          "self-attention: positions of one sequence with each other")),
    )


def _chapter_28() -> tuple[Question, ...]:
    evidence = _bundled(28)
    p = evidence.primary  # type: ignore[attr-defined]
    x = evidence.prefix  # type: ignore[attr-defined]
    tokens = int(p.query.shape[1])
    blocked = int(np.isneginf(p.mask).sum())
    allowed = tokens * tokens - blocked
    diagonal = bool(np.all(np.diagonal(p.mask) == 0.0))
    return (
        Question(1, f"With {tokens} tokens, how many query-key cells does the causal mask allow, "
                 "and how many does it block?", "numbers", (float(allowed), float(blocked)),
                 f"{allowed} and {blocked}",
                 "Query i sees keys 0..i: row 0 keeps one cell, row 1 two, row 2 three; the "
                 "cells above the diagonal are blocked.", parts=("allowed", "blocked")),
        Question(2, "Is a query's own position (the diagonal) allowed? (yes/no)", "yesno",
                 "yes" if diagonal else "no", "yes" if diagonal else "no",
                 "The mask is lower-triangular inclusive: decoder inputs are shifted by one, so "
                 "the diagonal holds a known earlier token, not the target itself."),
        Question(3, f"Q={_mat(p.query[0])}, K={_mat(p.key[0])}, V={_mat(p.value[0])}: predict "
                 "query 0's probability row and its output.", "numbers",
                 _numbers([*p.probabilities[0, 0], *p.output[0, 0]]),
                 f"{_vec(p.probabilities[0, 0])} and {_vec(p.output[0, 0])}",
                 "Query 0 sees only key 0, which takes probability 1: its output is v0 exactly.",
                 parts=("the probability row", "the output"),
                 sizes=(tokens, int(p.value.shape[2]))),
        Question(4, "Change the last token's key and value. Does the output at position 0 "
                 "change? (yes/no)", "yesno", "no" if x.unchanged[0] else "yes",
                 "no" if x.unchanged[0] else "yes",
                 "Earlier queries cannot see a later key: its probability is exactly 0 and the "
                 "earlier outputs keep every bit."),
        Question(5, "Instead of masking, zero the future probabilities after a softmax over all "
                 "keys. What goes wrong?", "choice", LETTERS[1],
                 "b) the surviving probabilities keep a denominator that counted blocked keys",
                 "Mask before normalising: A = softmax(S + M), so each allowed prefix sums to 1.",
                 choices=("nothing: it is the same computation",
                          "the surviving probabilities keep a denominator that counted blocked "
                          "keys",
                          "the blocked probabilities become negative")),
        Question(6, "During training all known positions are computed in parallel. Is "
                 "generation parallel too? (yes/no)", "yesno", "no", "no",
                 "Generation still emits one new token at a time: the mask lets training "
                 "evaluate known targets together, nothing more."),
    )


def _dot_after_rotation(q: Array, k: Array, m: int, n: int, theta: float) -> float:
    """``R(m theta) q . R(n theta) k`` for one pair, by qkv's RoPE (:func:`rotate`)."""
    rope = Rope(theta, 2, "interleaved")
    turned_q = rotate(q.reshape(1, 1, 2), rope._replace(offset=m))[0, 0]
    turned_k = rotate(k.reshape(1, 1, 2), rope._replace(offset=n))[0, 0]
    return float(turned_q @ turned_k)


def _chapter_29() -> tuple[Question, ...]:
    q, k = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    pairs = ((0, 0), (1, 0), (3, 2))
    dots = tuple(_dot_after_rotation(q, k, m, n, 1.0) for m, n in pairs)
    frequencies = _numbers(inverse_frequencies(Rope(100.0, 4, "interleaved")))
    x = np.array([[[0.6, -0.8, 1.5, 2.0]]])
    turned = rotate(x, Rope(100.0, 4, "interleaved", offset=5))
    keeps = math.isclose(float(np.linalg.norm(turned)), float(np.linalg.norm(x)), rel_tol=1e-12)
    identity = bool(np.array_equal(rotate(x, Rope(100.0, 4, "interleaved")), x))
    return (
        Question(1, "One pair, q=[1,0], k=[0,1], frequency theta0=1. The dot product of the "
                 "rotated q and k at positions (m,n) = (0,0), then (1,0), then (3,2)?",
                 "numbers", dots, ", ".join(_g(d) for d in dots),
                 "At (0,0) nothing turns and q.k = 0; at (1,0) R(1)q = [cos 1, sin 1] meets "
                 "[0,1]: sin 1; (3,2) keeps n-m = -1, so the dot product is the same.",
                 parts=("(0,0)", "(1,0)", "(3,2)")),
        Question(2, "Width d=4 (two adjacent pairs) and base b=100: the two frequencies "
                 "theta_k = b^(-2k/d)?", "numbers", frequencies, _vec(frequencies),
                 "theta_0 = 100^0 = 1 and theta_1 = 100^(-1/2) = 0.1: the second pair turns "
                 "ten times more slowly.", parts=("theta_0", "theta_1")),
        Question(3, "Does RoPE change the length of a query or key vector? (yes/no)", "yesno",
                 "no" if keeps else "yes", "no" if keeps else "yes",
                 "Each pair turns by a rotation, which is orthogonal: every pair's norm, and so "
                 "the vector's, is preserved."),
        Question(4, "Is position 0 the identity (the vector unchanged)? (yes/no)", "yesno",
                 "yes" if identity else "no", "yes" if identity else "no",
                 "Position 0 turns every pair by the angle 0 * theta_k = 0."),
        Question(5, "Are the value rows rotated too? (yes/no)", "yesno", "no", "no",
                 "Only queries and keys turn: rotation shapes the scores, and the causal mask "
                 "stays a separate operation."),
        Question(6, "The rotated query-key dot product depends on what?", "choice", LETTERS[1],
                 "b) the offset n-m together with the query and key contents and every "
                 "frequency",
                 "R(a)^T R(b) = R(b-a): the positions enter only as n-m, but the contents and "
                 "frequencies still matter; RoPE does not make the score a distance.",
                 choices=("only the distance n-m",
                          "the offset n-m together with the query and key contents and every "
                          "frequency",
                          "the absolute positions m and n separately")),
    )


def _chapter_30() -> tuple[Question, ...]:
    d_model, heads, tokens = 4, 2, 3
    rows = [[1.0, 0.0, 1.0, 0.0], [math.cos(1), -math.sin(1), 0.0, 1.0],
            [math.cos(2), -math.sin(2), 1.0, 1.0]]
    x = np.array([rows])
    eye = np.eye(d_model)
    rope = Rope(100.0, d_model // heads, "interleaved")
    head = AttentionHead.from_arrays(eye, eye, eye, rope=rope)
    swap = np.block([[np.zeros((2, 2)), np.eye(2)], [np.eye(2), np.zeros((2, 2))]])
    layer = MultiHeadLayer.build(head, heads, out_weight=swap)
    with np.errstate(over="ignore", invalid="ignore"):
        forward = engine.forward(layer, x, causal=True)
    split = forward.stacked["query"].shape
    weights = forward.attention.shape
    shapes = _numbers([*split, *weights, *forward.concat.shape])
    third = _numbers(forward.attention[0, 0, 2])
    try:
        MultiHeadLayer.build(head, 3)
        divisible = False
    except HeadCountMismatch:
        divisible = True
    count = layer.parameter_count
    return (
        Question(1, f"d_model={d_model} split into h={heads} heads: the head width d_h?",
                 "integer", (float(layer.d_k),), str(layer.d_k),
                 f"d_h = d_model / h = {d_model} / {heads} = {layer.d_k}."),
        Question(2, f"X is [1,{tokens},{d_model}] and h={heads}. Predict the shapes of the split "
                 "queries, of the attention weights A, and of Concat(H).", "numbers", shapes,
                 f"{_vec(split)}, {_vec(weights)} and {_vec(forward.concat.shape)}",
                 "Split: [B,h,T,d_h]; one [T,T] table per head: [B,h,T,T]; concatenation "
                 "puts the heads' blocks side by side again: [B,T,d_model].",
                 parts=("split(Q)", "A", "Concat(H)"),
                 sizes=(len(split), len(weights), len(forward.concat.shape))),
        Question(3, "Head 0's rotated queries and keys are all [1,0]. Under the causal mask, "
                 "what is its third probability row?", "numbers", third, _vec(third),
                 "Equal scores over the three visible keys: each gets 1/3.",
                 parts=("k0", "k1", "k2")),
        Question(4, "Which step first lets a feature from head 0 mix with one from head 1?",
                 "choice", LETTERS[2], "c) the multiplication by W_O",
                 "Each head attends on its own slice, and concatenation only places the blocks "
                 "side by side; W_O is the first learned map that reads both.",
                 choices=("the concatenation", "each head's attention",
                          "the multiplication by W_O")),
        Question(5, f"How many trainable scalars has the bias-free layer (W_Q, W_K, W_V, W_O, "
                 f"each [{d_model},{d_model}])?", "integer", (float(count),), str(count),
                 f"Four [{d_model},{d_model}] matrices: 4 x {d_model}^2 = {count}."),
        Question(6, f"Could the layer use h=3 heads with d_model={d_model}? (yes/no)", "yesno",
                 "no" if divisible else "yes", "no" if divisible else "yes",
                 "d_model must equal h * d_h: 4 is not divisible by 3, and qkv refuses the "
                 "layer."),
    )


RESET_CHOICES = (
    "the length to 0, the stored rows zeroed, and the binding refreshed to the layer's "
    "current parameters",
    "only the length, to 0: the storage (its values too) and its allocation stay, and the "
    "binding is neither refreshed nor rebound",
    "the length to 0 and the binding refreshed to the current parameters; the storage stays",
)
"""Question 6's choices: what a reset may change (the answer is what :meth:`reset` did)."""


def _reset_choice(length_zero: bool, storage_kept: bool, rebinds: bool) -> str:
    """The letter of :data:`RESET_CHOICES` that says what a reset was seen to do."""
    seen = {(True, False, True): 0, (True, True, False): 1, (True, True, True): 2}
    found = seen.get((length_zero, storage_kept, rebinds))
    if found is None:  # the engine's reset did none of the three: no choice is true
        raise AssertionError(f"reset did length 0={length_zero}, storage kept={storage_kept}, "
                             f"rebinds={rebinds}")
    return LETTERS[found]


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _chapter_37() -> tuple[Question, ...]:
    from qkvcli.chapters.ch37 import IncrementalFixture

    fixture = _bundled_fixture(37)
    assert isinstance(fixture, IncrementalFixture)
    return chapter_37_questions(fixture)


def chapter_37_questions(fixture: object) -> tuple[Question, ...]:
    """Chapter 37's nine questions about ``fixture`` (an
    :class:`~qkvcli.chapters.ch37.IncrementalFixture` of at least three tokens), each
    answer what qkv's KV cache did: the steps it took, the rows it read, its reset, and
    the typed refusals (:mod:`qkvcli.attention.errors`) caught when a cache is reused
    with rebuilt or updated weights or is full."""
    from qkvcli.attention.cache import DecodingLayer, KvCache, step
    from qkvcli.attention.errors import CacheFull, CacheLayerMismatch, CacheLayerRevisionMismatch
    from qkvcli.chapters.ch30 import layer_at
    from qkvcli.chapters.ch37 import IncrementalFixture, decoding_layer

    assert isinstance(fixture, IncrementalFixture)
    spec, x = fixture.spec, fixture.input
    batch, tokens = int(x.shape[0]), int(x.shape[1])
    layer = decoding_layer(spec)
    first, second = x[:, :1], x[:, 1:2]

    # 1-3, 5: the tokens one at a time through a cache of the fixture's capacity.
    cache = KvCache.for_layer(layer, batch, fixture.capacity)
    steps = [step(layer, cache, x[:, t:t + 1]) for t in range(tokens)]
    third = steps[2]
    held = sorted(name for name, kept in vars(cache).items() if isinstance(kept, np.ndarray))
    retains_query = held != ["keys", "values"]
    with np.errstate(over="ignore", invalid="ignore"):
        full = engine.forward(layer.layer, x, True)
    keeps_pass = bool(np.array_equal(cache.logical_keys(), full.stacked["rotated_key"])
                      and np.array_equal(cache.logical_values(), full.stacked["value"]))
    read = int(third.weights.shape[-1])
    # 4: the key projection of the causal pass over each prefix; 5: the steps' own keys.
    with np.errstate(over="ignore", invalid="ignore"):
        prefix_rows = [int(engine.forward(layer.layer, x[:, :p], True).stacked["key"].shape[2])
                       for p in range(1, tokens + 1)]
    step_rows = [int(s.appended_key.shape[2]) for s in steps]

    # 6: reset the cache in use, then step it with the same arrays updated in place.
    storage, binding, before = (cache.keys, cache.values), cache.binding, cache.state()
    cache.reset()
    storage_kept = (cache.keys is storage[0] and cache.values is storage[1]
                    and cache.unchanged(before._replace(length=0)) and cache.binding is binding)
    length_after = cache.length
    try:
        step(layer.updated(0), cache, first)
        rebinds = True
    except CacheLayerRevisionMismatch:
        rebinds = False
    reset_letter = _reset_choice(length_after == 0, storage_kept, rebinds)

    # 7: a cache in use, then the same values rebuilt as new arrays.
    used = KvCache.for_layer(layer, batch, fixture.capacity)
    step(layer, used, first)
    rebuilt = DecodingLayer(layer_at(spec, 0), spec.table.positions)
    try:
        step(rebuilt, used, second)
        rebuilt_refusal = ""
    except CacheLayerMismatch as error:
        rebuilt_refusal = str(error)

    # 8: a cache in use, then its layer's query weight updated in place (the next revision).
    kept = KvCache.for_layer(layer, batch, fixture.capacity)
    step(layer, kept, first)
    trained = layer.updated(0)
    try:
        step(trained, kept, second)
        trained_refusal = ""
    except CacheLayerRevisionMismatch as error:
        trained_refusal = str(error)
    kept.reset()
    try:
        step(trained, kept, first)
        reset_helps = True
    except CacheLayerRevisionMismatch:
        reset_helps = False

    # 9: a cache filled to its capacity (the tokens), then one more step.
    filled = KvCache.for_layer(layer, batch, tokens)
    for t in range(tokens):
        step(layer, filled, x[:, t:t + 1])
    full_before = filled.state()
    try:
        step(layer, filled, first)
        full_refusal = ""
    except CacheFull as error:
        full_refusal = str(error)
    intact = bool(full_refusal) and filled.unchanged(full_before)

    return (
        Question(1, "The cache already holds two rows (positions 0 and 1). At which absolute "
                 "RoPE position are the next token's query and key turned?", "integer",
                 (float(third.position),), str(third.position),
                 f"Computed: the third step found the cache at length {steps[1].position + 1} "
                 f"and turned Q and K at position {third.position}: the offset is the cache's "
                 "old length."),
        Question(2, "Does the cache retain a query row after the call? (yes/no)", "yesno",
                 _yes(retains_query), _yes(retains_query),
                 f"Computed: after {tokens} steps the cache holds only {listed(held)}, "
                 f"{_vec(cache.keys.shape)} each: "
                 f"{'the causal pass' if keeps_pass else 'not the causal pass'}'s rotated keys "
                 "and unrotated values. Each query is used once, in its own step, and "
                 "dropped."),
        Question(3, "At position two, how many key rows can the new query read?", "integer",
                 (float(read),), str(read),
                 f"Computed: the step at position {third.position} weighs {read} keys: the "
                 f"{third.position} retained rows plus its own candidate key."),
        Question(4, f"Across prefix lengths {listed([str(p) for p in range(1, tokens + 1)])}, "
                 "how many rows does the full-prefix key projection visit in all?", "integer",
                 (float(sum(prefix_rows)),), str(sum(prefix_rows)),
                 "Computed: the causal pass over each prefix projects "
                 f"{' + '.join(str(r) for r in prefix_rows)} = {sum(prefix_rows)} key rows; "
                 "every earlier row is projected again."),
        Question(5, "How many rows does the incremental key projection visit over the same "
                 "calls?", "integer", (float(sum(step_rows)),), str(sum(step_rows)),
                 f"Computed: each step projects only its new token: "
                 f"{' + '.join(str(r) for r in step_rows)} = {sum(step_rows)}; the other "
                 f"{sum(prefix_rows) - sum(step_rows)} key rows are read from the cache."),
        Question(6, "What does reset change, and does it refresh the cache's parameter "
                 "binding?", "choice", reset_letter,
                 f"{reset_letter}) {RESET_CHOICES[LETTERS.index(reset_letter)]}",
                 f"Computed: reset took the length from {before.length} to {length_after}; the "
                 f"storage {'stayed, the same arrays bit for bit' if storage_kept else 'changed'}"
                 "; a step with the weights updated in place was "
                 f"{'accepted' if rebinds else 'still refused'} after it.",
                 choices=RESET_CHOICES),
        Question(7, "May a same-shaped cache be reused with rebuilt weights (the same values, "
                 "new arrays)? (yes/no)", "yesno", _yes(not rebuilt_refusal),
                 _yes(not rebuilt_refusal),
                 ("Computed: the step was refused: " + rebuilt_refusal + ". Rebuilt weights are "
                  "new arrays; a new cache is needed.") if rebuilt_refusal else
                 "Computed: the step was accepted."),
        Question(8, "May the old cache be reused after an optimizer (AdamW) updates the same "
                 "weights in place? (yes/no)", "yesno", _yes(not trained_refusal),
                 _yes(not trained_refusal),
                 ("Computed: the step was refused: " + trained_refusal + "; after a reset "
                  + ("it was accepted" if reset_helps else "too") + ". A new cache is needed.")
                 if trained_refusal else "Computed: the step was accepted."),
        Question(9, "Does a full-cache error leave the previous rows intact? (yes/no)",
                 "yesno", _yes(intact), _yes(intact),
                 f"Computed: one more step on a cache full at {tokens} rows was refused "
                 f"({full_refusal or 'it was not'}); the stored rows and the length "
                 f"{'stayed bit for bit' if intact else 'changed'}."),
    )

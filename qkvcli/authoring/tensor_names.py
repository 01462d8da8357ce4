"""Which tensors of a checkpoint are an attention layer's, by their names alone.

Each tensor's role (:data:`ROLES`, :func:`role_of`), the prefixes of the layers and the
naming each uses (:data:`ANCHORS`, :func:`layer_prefixes`: GPT-2's, NeoX's, a plain
trio, ...), the packed or separate projections a naming reads, the buffers and other
tensors under a prefix that are not the function's parameters, cross-attention (which
qkv does not compute), and the refusal of a prefix that names no layer
(:class:`CheckpointError`, :func:`prefix_problem`). ``qkv inspect`` lists with these;
:mod:`qkvcli.authoring.checkpoint` writes a fixture with them. No I/O here.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from qkvcli.core.errors import QkvError
from qkvcli.core.text import printable

USER_TEXT_LIMIT = 120  # characters of user text (a prefix, a config value) in a message

Entry = tuple[str, str, tuple[int, ...]]  # name, dtype, shape

# (suffix of a tensor name, what it is), first match wins
_LINEAR = "(torch layout [out,in])"
ROLES = (
    ("attn.c_attn.weight", "GPT-2 c_attn weight: query|key|value packed, Conv1D [d_model,3*W] "
     "(GPT-BigCode's: torch rows)"),
    ("attn.c_attn.bias", "GPT-2 c_attn bias: query|key|value packed [3*W]"),
    ("attn.c_proj.weight", "GPT-2 c_proj weight: output projection, Conv1D [H*d_v,E_out]"),
    ("attn.c_proj.bias", "GPT-2 c_proj bias: output projection [E_out]"),
    ("attention.query_key_value.weight",
     "GPT-NeoX query_key_value weight: query,key,value interleaved per head [3*W,d_model]"),
    ("attention.query_key_value.bias", "GPT-NeoX query_key_value bias [3*W]"),
    ("attention.dense.weight", f"GPT-NeoX output projection weight {_LINEAR}"),
    ("attention.dense.bias", "GPT-NeoX output projection bias [E_out]"),
    ("attention.dense_bias", "GPT-NeoX Japanese output projection bias [E_out], a parameter "
     "beside dense (its last layer's)"),
    ("attention.output.dense.weight", f"BERT output projection weight {_LINEAR}"),
    ("attention.output.dense.bias", "BERT output projection bias [E_out]"),
    ("self_attention.query_key_value.weight",
     "BLOOM query_key_value weight: query,key,value interleaved per head [3*W,d_model]"),
    ("self_attention.query_key_value.bias", "BLOOM query_key_value bias [3*W]"),
    ("self_attention.dense.weight", f"BLOOM output projection weight {_LINEAR}"),
    ("self_attention.dense.bias", "BLOOM output projection bias [E_out]"),
    ("self_attn.query_key_value.weight",
     "Persimmon query_key_value weight: query,key,value interleaved per head [3*W,d_model]"),
    ("self_attn.query_key_value.bias", "Persimmon query_key_value bias [3*W]"),
    ("attn.Wqkv.weight", "MPT Wqkv weight: query, key, value row blocks [3*W,d_model]"),
    ("mixer.Wqkv.weight", "Jina Wqkv weight: query, key, value row blocks [3*W,d_model]"),
    ("mixer.Wqkv.bias", "Jina Wqkv bias [3*W]"),
    ("attn.Wqkv.bias", "Wqkv bias [3*W]"),
    *((f"self_attn.{branch}_layernorm.weight",
       f"{branch}_layernorm weight: RMSNorm of the rotated {branch[0].upper()} (Hunyuan V1) "
       "[d_head]") for branch in ("query", "key")),
    ("attn.Wo.weight", f"ModernBERT output projection weight {_LINEAR}"),
    ("attn.Wo.bias", "ModernBERT output projection bias [E_out]"),
    ("attention.qkv_proj.weight", "GTE qkv_proj weight: query, key, value rows "
     "[(H+2G)*d_head,d_model]"),
    ("attention.qkv_proj.bias", "GTE qkv_proj bias [(H+2G)*d_head]"),
    ("self_attn.qkv_proj.weight", "Phi-3 qkv_proj weight: query, key, value rows "
     "[(H+2G)*d_head,d_model]"),
    ("self_attn.qkv_proj.bias", "Phi-3 qkv_proj bias [(H+2G)*d_head]"),
    ("attn.qkv_proj.weight", "CodeGen qkv_proj weight: 4 blocks of query, value, key rows "
     "[3*W,d_model]"),
    ("self_attn.q_norm.weight", "q_norm weight: RMSNorm of Q (Qwen3, Gemma 3 [d_head]; "
     "OLMo 2 [H*d_head]), LayerNorm of Q (Cohere [H,d_head])"),
    ("self_attn.k_norm.weight", "k_norm weight: RMSNorm of K (Qwen3, Gemma 3 [d_head]; "
     "OLMo 2 [G*d_head]), LayerNorm of K (Cohere [G,d_head])"),
    *((f"self_attn.{letter}_layernorm.{part}",
       f"{letter}_layernorm {part}: LayerNorm of {letter.upper()} (Phi, Persimmon) [d_head]")
      for letter in "qk" for part in ("weight", "bias")),
    *((f"self_attn.{letter}_layernorm.norms.{{h}}.weight",
       f"{letter}_layernorm.norms.{{h}} weight: head h's LayerNorm of {letter.upper()} "
       "(StableLM) [d_head]") for letter in "qk"),
    ("self_attn.dense.weight", f"Phi (Persimmon) output projection weight {_LINEAR}"),
    ("self_attn.dense.bias", "Phi (Persimmon) output projection bias [E_out]"),
    *((f"{short}.{part}", f"{branch} projection {part} {_LINEAR}")
      for short, branch in (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value"),
                            ("o_proj", "output"), ("out_proj", "output"), ("query", "query"),
                            ("key", "key"), ("value", "value"), ("q_lin", "query"),
                            ("k_lin", "key"), ("v_lin", "value"), ("out_lin", "output"))
      for part in ("weight", "bias")),
)
# The tensor that marks a layer, and the naming of the tensors it marks (the layer's
# tensor names: GPT-2's, NeoX's, a plain q_proj/k_proj/v_proj trio, ...).
ANCHORS = (("c_attn.weight", "gpt2"), ("q_proj.weight", "linear"),
           ("query_key_value.weight", "neox"), ("query.weight", "bert"),
           ("q_lin.weight", "distil"), ("qkv_proj.weight", "blocks"), ("Wqkv.weight", "mpt"),
           ("SelfAttention.q.weight", "t5"))
# The packed projection each naming reads (its tensor relative to the prefix), torch rows.
PACKED = {"blocks": "qkv_proj.", "bigcode": "c_attn.", "falcon": "query_key_value."}
# The query, key and value modules of each naming with separate projections.
TRIOS = {"linear": ("q_proj", "k_proj", "v_proj"), "bert": ("query", "key", "value"),
         "distil": ("q_lin", "k_lin", "v_lin")}
# Attention tensors of layers qkv does not compute, and what they are: named when no
# layer qkv reads is found (the anchors of other families).
UNREAD = (("q_a_proj.weight", "multi-head latent attention's q_a_proj (DeepSeek-V2/V3)"),
          ("kv_a_proj_with_mqa.weight", "multi-head latent attention's kv_a_proj_with_mqa "
           "(DeepSeek-V2/V3)"),
          ("c_attn.weight", "a c_attn"), ("query_key_value.weight", "a query_key_value"))
# Tensors under a layer's prefix that are not parameters of its function: GPT-2's and
# GPT-Neo's stored causal-mask buffers, and RoPE's stored inverse frequencies, which the
# config's theta derives (older checkpoints save them).
BUFFERS = {"gpt2": ("bias", "masked_bias"), "bigcode": ("bias", "masked_bias"),
           "falcon": ("rotary_emb.inv_freq",),
           "blocks": ("rotary_emb.inv_freq",),
           "linear": ("bias", "masked_bias", "rotary_emb.inv_freq"),
           "neox": ("bias", "masked_bias", "rotary_emb.inv_freq")}
# What an unread tensor under the prefix is, when qkv knows (the refusal names it).
EXTRA_TENSORS = (("q_norm.", "a norm on Q (q_norm: Qwen3, Qwen3-MoE, OLMo 2, Gemma 3, Cohere "
                             "with use_qk_norm)"),
                 ("k_norm.", "a norm on K (k_norm: Qwen3, Qwen3-MoE, OLMo 2, Gemma 3, Cohere "
                             "with use_qk_norm)"),
                 ("q_layernorm.", "a layernorm on Q (Phi, StableLM, Persimmon with "
                                  "qk_layernorm)"),
                 ("k_layernorm.", "a layernorm on K (Phi, StableLM, Persimmon with "
                                  "qk_layernorm)"),
                 ("q_attn.", "cross-attention's query (GPT-2's crossattention)"),
                 ("relative_attention_bias.", "a relative position bias (T5)"))


class CheckpointError(QkvError):
    """The checkpoint or its config cannot give the layer under ``prefix``; says why."""

    def __init__(self, prefix: str, problem: str) -> None:
        self.prefix = prefix
        self.problem = problem
        super().__init__(f"prefix {shown_value(prefix)}: {problem}" if prefix else problem)


def shown_value(value: Any) -> str:
    """A config value or a user's text in a message: its JSON spelling (a string quoted),
    control characters escaped, cut at 120 characters; never a Python repr."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = str(value)
    return printable(text, USER_TEXT_LIMIT)


def role_of(name: str) -> str | None:
    """What a tensor is, if it is an attention projection qkv recognises, else ``None``."""
    name = re.sub(r"\.norms\.[0-9]+\.", ".norms.{h}.", name)  # a module per head
    for suffix, role in ROLES:
        if name == suffix or name.endswith("." + suffix):
            return role
    return None


def natural_key(text: str) -> list[Any]:
    """A sort key in which ``h.2.`` comes before ``h.10.``: each run of ASCII digits is
    compared by its value (length, then digits: no int of thousands of digits is made)."""
    return [(len(part.lstrip("0")), part.lstrip("0")) if i % 2 else part
            for i, part in enumerate(re.split(r"([0-9]+)", text))]


def layer_prefixes(names: list[str]) -> list[tuple[str, str]]:
    """``(prefix, naming)`` of every attention layer among ``names``, in natural order."""
    found: dict[str, str] = {}
    for name in names:
        for anchor, naming in ANCHORS:
            if name == anchor or name.endswith("." + anchor):
                tail = anchor.split(".", 1)[1] if naming == "t5" else anchor
                prefix = name[:len(name) - len(tail)]
                if naming == "bert" and not prefix.endswith("self."):
                    continue
                found.setdefault(prefix, naming)
                break
    return sorted(found.items(), key=lambda item: natural_key(item[0]))


def cross_attention(prefix: str, naming: str, names: set[str]) -> bool:
    """Whether the layer under ``prefix`` is a cross-attention (keys and values from the
    encoder): GPT-2's ``q_attn`` beside ``c_attn``, BERT's ``crossattention``, BART's and
    Whisper's ``encoder_attn``. qkv computes self-attention only."""
    return ((naming == "gpt2" and prefix + "q_attn.weight" in names)
            or (naming == "bert" and prefix.endswith("crossattention.self."))
            or "encoder_attn" in prefix.split("."))


def seen_attention(names: list[str]) -> str:
    """What the checkpoint's tensors show of attention, for a refusal that finds no layer
    qkv reads: a tensor of a family qkv does not compute (:data:`UNREAD`), else the
    first tensor whose name speaks of attention, else how many tensors there are."""
    for anchor, what in UNREAD:
        hit = next((n for n in sorted(names) if n == anchor or n.endswith("." + anchor)), None)
        if hit is not None:
            return f"it has {shown_value(hit)}, {what}"
    hit = next((n for n in sorted(names) if "attn" in n.lower() or "attention" in n.lower()),
               None)
    if hit is not None:
        return f"its attention tensors include {shown_value(hit)}"
    return f"none of its {len(names)} tensors is named as attention"


def prefix_problem(prefix: str, layers: list[tuple[str, str]],
                   names: list[str] | None = None) -> CheckpointError:
    """The error for a prefix that names no layer: the prefixes that exist, and a guess;
    without any, what the checkpoint holds (``names``, its tensors)."""
    if not layers:
        return CheckpointError(prefix, "the checkpoint has no attention layer qkv recognises; "
                               f"{seen_attention(names or [])} (qkv inspect lists its tensors)")
    names = [p for p, _ in layers]
    shown = ", ".join(printable(name, USER_TEXT_LIMIT) for name in names[:6]) + (
        f" ... ({len(names)} layers)" if len(names) > 6 else "")
    close = difflib.get_close_matches(prefix, names, n=1, cutoff=0.5)
    guess = f"; did you mean {printable(close[0], USER_TEXT_LIMIT)}?" if close and prefix else ""
    start = "no attention layer under it" if prefix else "--prefix is needed"
    return CheckpointError(prefix, f"{start}; the layer prefixes are {shown}{guess}")


MAX_LAYER_DIGITS = 9


def layer_index(prefix: str) -> int | None:
    """The layer's number in the model: the last integer component of ``prefix``
    (ASCII digits). Raises :class:`CheckpointError` for one of more than
    :data:`MAX_LAYER_DIGITS` digits: no model has a billion layers."""
    numbers = re.findall(r"(?:^|\.)([0-9]+)(?=\.)", prefix)
    if not numbers:
        return None
    if len(numbers[-1].lstrip("0")) > MAX_LAYER_DIGITS:
        raise CheckpointError(prefix, f"the layer number in the prefix has {len(numbers[-1])} "
                              f"digits; qkv reads layer numbers of at most {MAX_LAYER_DIGITS}")
    return int(numbers[-1])

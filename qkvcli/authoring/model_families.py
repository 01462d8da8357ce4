"""What each model family's attention is, as transformers builds it: the table qkv reads
a checkpoint's ``config.json`` against (:mod:`qkvcli.authoring.config` does the reading).

Per ``model_type``: its tensors' naming, causality, RoPE layout, module path, output
projection and biases (:class:`ModelFamily`); the families refused by name and the keys that
ask for what qkv does not compute; each family's config defaults and RoPE theta; its
norms of Q and K; how it derives its layers' types and each type's theta. Data only.
"""

from __future__ import annotations

from typing import Any

from qkvcli.authoring.checkpoint import NormFunction
from qkvcli.core.record import Record


class ModelFamily(Record):
    """What a ``model_type``'s attention is, as far as qkv reads it."""

    title: str
    naming: str  # the tensors' names under the prefix (checkpoint.ANCHORS)
    causal: str  # "yes", "no", "decoder" (is_decoder), "prefix" (encoder. or decoder. in it),
    # "causal" (the config's own causal key: XLM's)
    rope: str | None  # None, or RoPE's layout: "half" (rotate_half), "interleaved"
    classes: str  # the start of its transformers classes' names (config "architectures")
    window: str | None = None  # how its config gives a sliding window (see _window)
    scale: str | None = None  # how its config gives the score factor (see _scale)
    out: str = "o_proj"  # its output projection's module under the prefix ("": outside it)
    path: str | None = None  # the end of its layers' prefixes (a regular expression)
    biases: str = "attention_bias"  # which of its projections carry a bias (see BIASES)


_LAYERS = r"layers\.[^.]+\.self_attn\."  # LLaMA's and most decoders' module path
_SIDES = r"(?:encoder|decoder)\.layers\.[^.]+\.self_attn\."  # BART's, either side


_FAMILIES = (
    ("gpt2", ModelFamily("GPT-2", "gpt2", "yes", None, "GPT2", scale="gpt2", out="c_proj",
                         biases="all")),
    ("bert", ModelFamily("BERT", "bert", "decoder", None, "Bert", out="", biases="all")),
    ("roberta", ModelFamily("RoBERTa", "bert", "decoder", None, "Roberta", out="", biases="all")),
    ("xlm-roberta", ModelFamily("XLM-RoBERTa", "bert", "decoder", None, "XLMRoberta", out="",
                                biases="all")),
    ("electra", ModelFamily("ELECTRA", "bert", "decoder", None, "Electra", out="", biases="all")),
    # BERT's tensors; its queries and keys read its bottleneck, its values the layer's
    # input where its config says (BOTTLENECKED); never causal (its model masks nothing)
    ("mobilebert", ModelFamily("MobileBERT", "bert", "no", None, "MobileBert", out="",
                               biases="all")),
    ("distilbert", ModelFamily("DistilBERT", "distil", "no", None, "DistilBert", out="out_lin",
                               biases="all")),
    # XLM's MultiHeadAttention (DistilBERT's names, under attentions.N.), causal by its config
    *((model_type, ModelFamily(title, "distil", "causal", None, classes, out="out_lin",
                               path=r"attentions\.[^.]+\.", biases="all"))
      for model_type, title, classes in (("xlm", "XLM", "XLM"),
                                         ("flaubert", "FlauBERT", "Flaubert"))),
    ("llama", ModelFamily("LLaMA", "linear", "yes", "half", "Llama", path=_LAYERS)),
    ("mistral", ModelFamily("Mistral", "linear", "yes", "half", "Mistral", window="all",
                            path=_LAYERS, biases="none")),
    ("mixtral", ModelFamily("Mixtral", "linear", "yes", "half", "Mixtral", window="all",
                            path=_LAYERS, biases="none")),
    ("starcoder2", ModelFamily("Starcoder2", "linear", "yes", "half", "Starcoder2", window="all",
                               path=_LAYERS, biases="use_bias")),
    ("qwen2", ModelFamily("Qwen2", "linear", "yes", "half", "Qwen2", window="qwen2", path=_LAYERS,
                          biases="qkv")),
    ("smollm3", ModelFamily("SmolLM3", "linear", "yes", "half", "SmolLM3", window="smollm3",
                            path=_LAYERS)),
    ("granite", ModelFamily("Granite", "linear", "yes", "half", "Granite", scale="granite",
                            path=_LAYERS)),
    ("gemma", ModelFamily("Gemma", "linear", "yes", "half", "Gemma", path=_LAYERS)),
    ("gemma2", ModelFamily("Gemma 2", "linear", "yes", "half", "Gemma2", window="gemma2",
                           scale="gemma2", path=_LAYERS)),
    ("olmo", ModelFamily("OLMo", "linear", "yes", "half", "Olmo", path=_LAYERS)),
    ("gemma3_text", ModelFamily("Gemma 3", "linear", "yes", "half", "Gemma3", window="types",
                                scale="gemma2", path=_LAYERS)),
    ("qwen3", ModelFamily("Qwen3", "linear", "yes", "half", "Qwen3", window="qwen2", path=_LAYERS)),
    ("qwen3_moe", ModelFamily("Qwen3-MoE", "linear", "yes", "half", "Qwen3Moe", window="qwen3_moe",
                              path=_LAYERS)),
    ("olmo2", ModelFamily("OLMo 2", "linear", "yes", "half", "Olmo2", path=_LAYERS)),
    ("olmo3", ModelFamily("OLMo 3", "linear", "yes", "half", "Olmo3", window="types", path=_LAYERS)),
    ("stablelm", ModelFamily("StableLM", "linear", "yes", "half", "StableLm", path=_LAYERS,
                             biases="use_qkv_bias")),
    ("phi", ModelFamily("Phi", "linear", "yes", "half", "Phi", out="dense", path=_LAYERS,
                        biases="all")),
    ("cohere", ModelFamily("Cohere", "linear", "yes", "interleaved", "Cohere", path=_LAYERS)),
    ("gptj", ModelFamily("GPT-J", "linear", "yes", "interleaved", "GPTJ", out="out_proj",
                         path=r"h\.[^.]+\.attn\.", biases="none")),
    ("gpt_neox", ModelFamily("GPT-NeoX", "neox", "yes", "half", "GPTNeoX", out="dense",
                             path=r"layers\.[^.]+\.attention\.", biases="attention_bias")),
    # GPT-NeoX's packing without biases; its last layer's dense bias a parameter of its own
    ("gpt_neox_japanese", ModelFamily("GPT-NeoX Japanese", "neox", "yes", "half",
                                      "GPTNeoXJapanese", out="dense",
                                      path=r"layers\.[^.]+\.attention\.", biases="none")),
    ("bloom", ModelFamily("BLOOM", "neox", "yes", None, "Bloom", out="dense",
                          path=r"h\.[^.]+\.self_attention\.", biases="all")),
    ("persimmon", ModelFamily("Persimmon", "neox", "yes", "half", "Persimmon", out="dense",
                              path=_LAYERS, biases="all")),
    ("falcon", ModelFamily("Falcon", "falcon", "yes", "half", "Falcon", out="dense",
                           path=r"h\.[^.]+\.self_attention\.", biases="bias")),
    ("opt", ModelFamily("OPT", "linear", "yes", None, "OPT", out="out_proj",
                        path=r"decoder\.layers\.[^.]+\.self_attn\.", biases="enable_bias")),
    ("mpt", ModelFamily("MPT", "mpt", "yes", None, "Mpt", out="out_proj", biases="none")),
    ("codegen", ModelFamily("CodeGen", "codegen", "yes", "interleaved", "CodeGen", out="out_proj",
                            biases="none")),
    ("phi3", ModelFamily("Phi-3", "blocks", "yes", "half", "Phi3", window="all", biases="none")),
    ("gpt_bigcode", ModelFamily("GPT-BigCode", "bigcode", "yes", None, "GPTBigCode",
                                scale="bigcode", out="c_proj", biases="all")),
    ("gpt_neo", ModelFamily("GPT-Neo", "linear", "yes", None, "GPTNeo", window="gpt_neo",
                            scale="one", out="out_proj", path=r"h\.[^.]+\.attn\.attention\.",
                            biases="out")),
    ("bart", ModelFamily("BART", "linear", "prefix", None, "Bart", out="out_proj",
                         path=r"(?:encoder|decoder)\.layers\.[^.]+\.self_attn\.", biases="all")),
    ("whisper", ModelFamily("Whisper", "linear", "prefix", None, "Whisper", out="out_proj",
                            path=r"(?:encoder|decoder)\.layers\.[^.]+\.self_attn\.",
                            biases="not_key")),
    ("clip_text_model", ModelFamily("CLIP text", "linear", "yes", None, "CLIP", out="out_proj",
                                    path=r"encoder\.layers\.[^.]+\.self_attn\.", biases="all")),
    # LLaMA's attention under other configs (issue 43): each its biases, defaults, norms
    ("arcee", ModelFamily("Arcee", "linear", "yes", "half", "Arcee", path=_LAYERS)),
    # EXAONE's checkpoints keep their own names (transformers maps them onto LLaMA's)
    ("exaone", ModelFamily("EXAONE", "linear", "yes", "half", "Llama", out="out_proj",
                           path=r"layers\.[^.]+\.attn\.attention\.")),
    ("internlm3", ModelFamily("InternLM3", "linear", "yes", "half", "Llama", path=_LAYERS)),
    ("iquestcoder", ModelFamily("IQuestCoder", "linear", "yes", "half", "Llama", path=_LAYERS)),
    ("solar_open", ModelFamily("Solar Open", "linear", "yes", "half", "SolarOpen", path=_LAYERS,
                               biases="attention_bias|")),
    ("seed_oss", ModelFamily("Seed-OSS", "linear", "yes", "half", "SeedOss", path=_LAYERS,
                             biases="attention_bias|attention_out_bias")),
    ("hyperclovax", ModelFamily("HyperCLOVA X", "linear", "yes", "half", "HyperCLOVAX",
                                scale="granite", path=_LAYERS)),
    ("granitemoe", ModelFamily("Granite-MoE", "linear", "yes", "half", "GraniteMoe",
                               scale="granite", path=_LAYERS)),
    ("granitemoeshared", ModelFamily("Granite-MoE shared", "linear", "yes", "half",
                                     "GraniteMoeShared", scale="granite", path=_LAYERS)),
    ("helium", ModelFamily("Helium", "linear", "yes", "interleaved", "Helium", path=_LAYERS,
                           biases="attention_bias|")),
    ("glm", ModelFamily("GLM", "linear", "yes", "interleaved", "Glm", path=_LAYERS,
                        biases="attention_bias|")),
    ("glm4", ModelFamily("GLM-4", "linear", "yes", "interleaved", "Glm4", path=_LAYERS,
                         biases="attention_bias|")),
    ("ernie4_5", ModelFamily("ERNIE 4.5", "linear", "yes", "interleaved", "Ernie4_5",
                             path=_LAYERS, biases="use_bias")),
    ("ministral", ModelFamily("Ministral", "linear", "yes", "half", "Ministral", window="types",
                              path=_LAYERS, biases="none")),
    ("cwm", ModelFamily("CWM", "linear", "yes", "half", "Cwm", window="types", path=_LAYERS,
                        biases="none")),
    ("dots1", ModelFamily("dots.llm1", "linear", "yes", "half", "Dots1", window="types",
                          path=_LAYERS)),
    ("olmoe", ModelFamily("OLMoE", "linear", "yes", "half", "Olmoe", path=_LAYERS)),
    ("flex_olmo", ModelFamily("FlexOlmo", "linear", "yes", "half", "FlexOlmo", path=_LAYERS)),
    ("glm4_moe", ModelFamily("GLM-4-MoE", "linear", "yes", "half", "Glm4Moe", path=_LAYERS,
                             biases="attention_bias|")),
    ("apertus", ModelFamily("Apertus", "linear", "yes", "half", "Apertus", path=_LAYERS)),
    ("ernie4_5_moe", ModelFamily("ERNIE 4.5 MoE", "linear", "yes", "interleaved", "Ernie4_5_Moe",
                                 path=_LAYERS, biases="use_bias")),
    ("phimoe", ModelFamily("PhiMoE", "linear", "yes", "half", "Phimoe", window="all",
                           path=_LAYERS)),
    ("aria_text", ModelFamily("Aria text", "linear", "yes", "half", "AriaText", path=_LAYERS)),
    ("ministral3", ModelFamily("Ministral 3", "linear", "yes", "half", "Ministral3", window="all",
                               path=_LAYERS, biases="none")),
    ("nemotron", ModelFamily("Nemotron", "linear", "yes", "half", "Nemotron", path=_LAYERS)),
    ("vaultgemma", ModelFamily("VaultGemma", "linear", "yes", "half", "VaultGemma",
                               window="gemma2", scale="gemma2", path=_LAYERS)),
    # RoPE on the sliding layers only (ROPE_ON_SLIDING)
    ("cohere2", ModelFamily("Cohere 2", "linear", "yes", "interleaved", "Cohere2", window="types",
                            path=_LAYERS)),
    ("exaone4", ModelFamily("EXAONE 4", "linear", "yes", "half", "Exaone4", window="types",
                            path=_LAYERS, biases="none")),
    ("exaone_moe", ModelFamily("EXAONE MoE", "linear", "yes", "half", "ExaoneMoe",
                               window="types", path=_LAYERS, biases="none")),
    ("mellum", ModelFamily("Mellum", "linear", "yes", "half", "Mellum", window="types",
                           path=_LAYERS)),
    ("qwen2_moe", ModelFamily("Qwen2-MoE", "linear", "yes", "half", "Qwen2Moe", window="types",
                              path=_LAYERS, biases="qkv_bias|")),
    ("openai-gpt", ModelFamily("OpenAI GPT", "gpt2", "yes", None, "OpenAIGPT", out="c_proj",
                               biases="all")),
    ("trocr", ModelFamily("TrOCR decoder", "linear", "prefix", None, "TrOCR", out="out_proj",
                          path=_SIDES, biases="all")),
    ("lfm2", ModelFamily("LFM2", "linear", "yes", "half", "Lfm2", out="out_proj", path=_LAYERS,
                         biases="none")),
    ("jais2", ModelFamily("Jais 2", "linear", "yes", "half", "Jais2", path=_LAYERS)),
    ("apertus1p5_text", ModelFamily("Apertus 1.5 text", "linear", "yes", "half",
                                    "Apertus1p5Text", path=_LAYERS)),
    ("kolibri1", ModelFamily("Kolibri 1", "linear", "yes", "half", "Kolibri1", window="types",
                             path=_LAYERS, biases="none")),
    ("olmo_hybrid", ModelFamily("OLMo hybrid", "linear", "yes", "half", "OlmoHybrid",
                                path=_LAYERS)),
    ("lara_mini", ModelFamily("Lara mini", "linear", "yes", "half", "LaraMini", window="types",
                              path=_LAYERS)),
    ("minimax_m2", ModelFamily("MiniMax-M2", "linear", "yes", "half", "MiniMaxM2", path=_LAYERS,
                               biases="none")),
    ("hy_v3", ModelFamily("Hunyuan V3", "linear", "yes", "half", "HYV3", path=_LAYERS)),
    # their q/k norm after RoPE (QK_NORM_AFTER_ROPE)
    ("hunyuan_v1_dense", ModelFamily("Hunyuan V1 dense", "linear", "yes", "half",
                                     "HunYuanDenseV1", path=_LAYERS)),
    ("hunyuan_v1_moe", ModelFamily("Hunyuan V1 MoE", "linear", "yes", "half", "HunYuanMoEV1",
                                   path=_LAYERS)),
    # the text towers of CLIP's kin (CLIP's attention; causal where the model masks)
    *((model_type, ModelFamily(title, "linear", causal, None, classes, out="out_proj",
                               path=r"encoder\.layers\.[^.]+\.self_attn\.", biases="all"))
      for model_type, title, classes, causal in (
          ("siglip_text_model", "SigLIP text", "Siglip", "no"),
          ("siglip2_text_model", "SigLIP 2 text", "Siglip2", "no"),
          ("clipseg_text_model", "CLIPSeg text", "CLIPSeg", "yes"),
          ("owlvit_text_model", "OWL-ViT text", "OwlViT", "yes"),
          ("owlv2_text_model", "OWLv2 text", "Owlv2", "yes"),
          ("groupvit_text_model", "GroupViT text", "GroupViT", "yes"),
          ("metaclip_2_text_model", "MetaCLIP 2 text", "MetaClip2", "yes"),
          ("xclip_text_model", "X-CLIP text", "XCLIP", "yes"))),
    *((model_type, ModelFamily(title, "bert", "no", None, classes, out="", biases="all"))
      for model_type, title, classes in (
          ("chinese_clip_text_model", "Chinese-CLIP text", "ChineseCLIP"),
          ("altclip_text_model", "AltCLIP text", "AltCLIP"),
          ("clap_text_model", "CLAP text", "Clap"))),
    # the softmax layers of hybrid stacks (HYBRID_LAYERS: their other layers' kinds)
    ("bamba", ModelFamily("Bamba", "linear", "yes", "half", "Bamba", path=_LAYERS)),
    ("falcon_h1", ModelFamily("Falcon-H1", "linear", "yes", "half", "FalconH1",
                              scale="key_multiplier", path=_LAYERS)),
    ("minimax", ModelFamily("MiniMax", "linear", "yes", "half", "MiniMax", window="all",
                            path=_LAYERS, biases="none")),
    ("jamba", ModelFamily("Jamba", "linear", "yes", None, "Jamba", path=_LAYERS,
                          biases="none")),
    ("granitemoehybrid", ModelFamily("Granite-MoE hybrid", "linear", "yes", "half",
                                     "GraniteMoeHybrid", scale="granite", path=_LAYERS)),
    ("nemotron_h", ModelFamily("Nemotron-H", "linear", "yes", None, "NemotronH",
                               path=r"layers\.[^.]+\.mixer\.", biases="none")),
    # its attention blocks among recurrent ones (BLOCK_TYPES); o_proj always biased
    ("recurrent_gemma", ModelFamily("RecurrentGemma", "linear", "yes", "half", "RecurrentGemma",
                                    window="blocks", path=r"layers\.[^.]+\.temporal_block\.",
                                    biases="attention_bias|all")),
    # bidirectional encoders with LLaMA's rotated attention
    # (their checkpoints keep their own packed names, which transformers splits on loading:
    # GTE's qkv_proj as Phi-3's, Nomic's and Jina's Wqkv as MPT's, query|key|value rows)
    ("gte", ModelFamily("GTE", "blocks", "no", "half", "Gte",
                        path=r"encoder\.layer\.[^.]+\.attention\.", biases="all")),
    ("nomic_bert", ModelFamily("Nomic BERT", "mpt", "no", "half", "NomicBert", out="out_proj",
                               path=r"encoder\.layers\.[^.]+\.attn\.", biases="none")),
    ("jina_embeddings_v3", ModelFamily("Jina embeddings v3", "mpt", "no", "half",
                                       "JinaEmbeddingsV3", out="out_proj",
                                       path=r"encoder\.layers\.[^.]+\.mixer\.", biases="all")),
    ("eurobert", ModelFamily("EuroBERT", "linear", "no", "half", "EuroBert", path=_LAYERS)),
    # its q/k LayerNorm over the layer's width on every checkpoint (FULL_WIDTH_QK_LAYER_NORMS)
    ("esmc", ModelFamily("ESMC", "linear", "no", "half", "Esmc", path=_LAYERS)),
    # BERT's attention, rotated by position_embedding_type "rotary" (ROPE_BY_KEY) with the
    # frequencies the checkpoint stores (STORED_ROPE), causal when is_decoder
    ("esm", ModelFamily("ESM", "bert", "decoder", "half", "Esm", out="",
                        path=r"encoder\.layer\.[^.]+\.attention\.self\.", biases="all")),
    # rotated encoders whose local layers see a two-sided window (TWO_SIDED_WINDOWS)
    ("modernbert", ModelFamily("ModernBERT", "mpt", "no", "half", "ModernBert",
                               window="two_sided", out="Wo", path=r"layers\.[^.]+\.attn\.")),
    ("ultrabert", ModelFamily("UltraBERT", "linear", "no", "half", "Ultrabert",
                              window="two_sided", path=_LAYERS)),
    # BART's attention in other encoder-decoders and decoders
    *((model_type, ModelFamily(title, "linear", "prefix", None, classes, out="out_proj",
                               path=_SIDES, biases="all"))
      for model_type, title, classes in (
          ("marian", "Marian", "Marian"), ("pegasus", "Pegasus", "Pegasus"),
          ("blenderbot", "Blenderbot", "Blenderbot"),
          ("blenderbot-small", "Blenderbot small", "BlenderbotSmall"), ("mvp", "MVP", "Mvp"),
          ("m2m_100", "M2M100", "M2M100"), ("nllb-moe", "NLLB-MoE", "NllbMoe"),
          ("mbart", "mBART", "MBart"), ("plbart", "PLBart", "PLBart"))),
    # BERT's self-attention and output dense in other encoders: causal when is_decoder
    # ("decoder"), or never, where the model builds no causal mask ("no")
    *((model_type, ModelFamily(title, "bert", causal, None, classes, out="", biases="all"))
      for model_type, title, classes, causal in (
          ("camembert", "CamemBERT", "Camembert", "decoder"),
          ("data2vec-text", "Data2Vec text", "Data2VecText", "decoder"),
          ("ernie", "ERNIE", "Ernie", "decoder"),
          ("megatron-bert", "Megatron-BERT", "MegatronBert", "decoder"),
          ("xlm-roberta-xl", "XLM-RoBERTa-XL", "XLMRobertaXL", "decoder"),
          ("roberta-prelayernorm", "RoBERTa-PreLayerNorm", "RobertaPreLayerNorm", "decoder"),
          ("rembert", "RemBERT", "RemBert", "decoder"), ("tapas", "TAPAS", "Tapas", "no"),
          ("xmod", "X-MOD", "Xmod", "decoder"), ("roc_bert", "RoCBert", "RoCBert", "decoder"),
          ("bert-generation", "BertGeneration", "BertGeneration", "decoder"),
          ("layoutlm", "LayoutLM", "LayoutLM", "no"), ("splinter", "Splinter", "Splinter", "no"),
          ("markuplm", "MarkupLM", "MarkupLM", "no"))),
    ("xglm", ModelFamily("XGLM", "linear", "yes", None, "XGLM", out="out_proj",
                         path=_LAYERS, biases="all")),
    ("biogpt", ModelFamily("BioGPT", "linear", "yes", None, "BioGpt", out="out_proj",
                           path=_LAYERS, biases="all")),
)


FAMILIES = dict(_FAMILIES)
"""Every ``model_type`` qkv computes, and how it reads each one's config."""


SUPPORTED = tuple(FAMILIES)




REFUSED_MODELS = {
    "t5": "a relative position bias (relative_attention_num_buckets) and no 1/sqrt(d_k) scale",
    "mt5": "a relative position bias and no 1/sqrt(d_k) scale (T5's attention)",
    "umt5": "a relative position bias and no 1/sqrt(d_k) scale (T5's attention)",
    "longt5": "a relative position bias and local attention (T5's attention)",
    "gemma3": "a multimodal model in one config (a vision tower beside the text model): give "
              "the text model's own config (model_type gemma3_text)",
    "deepseek_v2": "multi-head latent attention (q_a_proj, kv_a_proj_with_mqa: low-rank Q "
                   "and K/V with a separate RoPE part), which qkv does not compute",
    "deepseek_v3": "multi-head latent attention (q_a_proj, kv_a_proj_with_mqa: low-rank Q "
                   "and K/V with a separate RoPE part), which qkv does not compute",
    **{model_type: "attention sinks (a learned logit per head beside the scores' softmax)"
       for model_type in ("gpt_oss",)},
    **{model_type: "an output gate on the attention (a sigmoid of the input multiplies it)"
       for model_type in ("qwen3_next", "qwen3_5", "qwen3_5_moe")},
    **{model_type: "multi-head latent attention (low-rank Q and K/V with a separate RoPE "
       "part)" for model_type in ("longcat_flash", "kimi_linear", "glm4_moe_lite")},
    **{model_type: "a relative position bias in the scores"
       for model_type in ("mpnet", "switch_transformers", "pop2piano", "udop", "transfo-xl")},
    **{model_type: "disentangled (content-to-position) attention"
       for model_type in ("deberta", "deberta-v2", "sew-d")},
    **{model_type: "sparse or windowed-global attention (blocks, global tokens)"
       for model_type in ("big_bird", "bigbird_pegasus", "longformer", "led", "pegasus_x",
                          "reformer")},
    **{model_type: "differential attention (two softmax maps subtracted)"
       for model_type in ("diffllama",)},
    "llama4_text": "chunked attention, an L2 norm of Q and K and a position-dependent "
                   "temperature on some layers",
    "gemma3n_text": "key/value sharing across layers and a norm of V",
    "funnel": "pooled queries and relative attention",
    "xlnet": "two-stream relative attention",
    "cohere2_moe": "RoPE forced on some full layers by its MLP layer types",
    "nanochat": "a q/k RMSNorm without a learned weight",
    "embedding_gemma2_text": "a norm of V beside its q/k norms",
    "timesfm2_5": "a learned per-dimension scale of Q (softplus)",
    "glm_ocr_text": "a multimodal RoPE (positions per modality section)",
    "youtu": "multi-head latent attention (low-rank Q and K/V with a separate RoPE part)",
    "granite_swa": "attention sinks (a learned logit per head beside the scores' softmax)",
    "granitemoe_swa": "attention sinks (a learned logit per head beside the scores' softmax)",
    "flint": "attention sinks (a softmax offset per head)",
    "laguna": "an output gate on the attention (g_proj)",
    "afmoe": "an output gate on the attention (gate_proj)",
    "beam": "an output gate on the attention (gate_proj)",
    "dory": "a gated, differential-style attention (g_proj, s_gate, lambdas)",
    "mistral4": "multi-head latent attention (low-rank Q and K/V with a separate RoPE part)",
    "mistral_large4_text": "multi-head latent attention with an indexer (sparse attention)",
    "mimo_v2_flash": "attention sinks on its sliding layers",
    "inkling2_text": "attention sinks projected from the input, and convolved keys",
    "muse_glimmer_text": "an output gate on the attention (gate_proj)",
    **{model_type: "a hybrid stack whose softmax layers qkv does not yet read"
       for model_type in ("zamba", "zamba2", "lfm2_moe")},
    **{model_type: "a multimodal RoPE (positions per modality section)"
       for model_type in ("qwen2_vl_text", "qwen2_5_vl_text", "glm4v_text", "qwen3_vl_text")},
    **{model_type: "a multimodal model in one config: give its text model's own config"
       for model_type in ("mistral3", "llava", "qwen2_vl", "qwen2_5_vl", "glm4v", "aria",
                          "idefics3", "smolvlm", "paligemma")},
    "bitnet": "a norm inside the attention before its output projection",
    "jetmoe": "a mixture of attention heads",
    "doge": "a dynamic mask learned from the values",
    "dbrx": "its own packed Wqkv layout with clipping, not yet checked against its module",
    "ctrl": "its own projections (Wq, Wk, Wv, dense), not yet checked against its module",
    "t5gemma": "an encoder-decoder of Gemma 2 layers with cross-attention",
    "fsmt": "its own attention class, not yet checked against its module",
}
"""Families qkv knows by name and does not compute: what they add, for the refusal."""


REFUSED_KEYS = (
    ("alibi", "ALiBi position biases"), ("use_alibi", "ALiBi position biases"),
    ("attn_logit_softcapping", "logit soft-capping of the scores"),
    ("qk_norm", "QK-norm"), ("use_qk_norm", "QK-norm"), ("qk_layernorm", "QK-norm"),
    ("clip_qkv", "clipping of Q, K and V (clip_qkv)"),
    ("relative_attention_num_buckets", "a relative position bias"),
    ("add_cross_attention", "cross-attention layers"),
    ("use_bidirectional_attention", "bidirectional attention in a causal family"),
)
"""Config keys that, when set (not null, false or 0), ask for what qkv does not compute."""


DEFAULTS: dict[str, dict[str, Any]] = {
    "granite": {"attention_multiplier": 1.0},
    "mistral": {"sliding_window": 4096},
    "gemma": {"head_dim": 256},
    "gpt_neox": {"partial_rotary_factor": 0.25, "attention_bias": True},
    "gpt_neox_japanese": {"partial_rotary_factor": 1.0, "num_hidden_layers": 32},
    "opt": {"enable_bias": True},
    "stablelm": {"partial_rotary_factor": 0.25},
    "phi": {"partial_rotary_factor": 0.5},
    "persimmon": {"partial_rotary_factor": 0.5, "qk_layernorm": True},
    "gpt_neo": {"window_size": 256},
    "qwen2": {"sliding_window": 4096, "max_window_layers": 28},
    "qwen3": {"sliding_window": 4096, "max_window_layers": 28, "rms_norm_eps": 1e-6,
              "head_dim": 128},
    "qwen3_moe": {"sliding_window": 4096, "rms_norm_eps": 1e-6},
    "olmo2": {"rms_norm_eps": 1e-5},
    "olmo3": {"rms_norm_eps": 1e-5, "sliding_window": 4096},
    "gemma3_text": {"query_pre_attn_scalar": 256, "sliding_window": 4096, "rms_norm_eps": 1e-6,
                    "sliding_window_pattern": 6, "head_dim": 256},
    "starcoder2": {"use_bias": True},
    "gptj": {"rotary_dim": 64},
    "codegen": {"rotary_dim": 64},
    "gpt_bigcode": {"multi_query": True},
    "falcon": {"multi_query": True, "new_decoder_architecture": False},
    "phi3": {"original_max_position_embeddings": 4096},  # read by a LongRoPE scaling
    "internlm3": {"head_dim": 128},
    "iquestcoder": {"head_dim": 128},
    "solar_open": {"head_dim": 128},
    "seed_oss": {"head_dim": 128, "attention_bias": True},
    "granitemoe": {"attention_multiplier": 1.0},
    "granitemoeshared": {"attention_multiplier": 1.0},
    "helium": {"head_dim": 128},
    "glm": {"head_dim": 128, "attention_bias": True, "partial_rotary_factor": 0.5},
    "glm4": {"head_dim": 128, "attention_bias": True, "partial_rotary_factor": 0.5},
    "glm4_moe": {"partial_rotary_factor": 0.5, "rms_norm_eps": 1e-5},
    "ernie4_5": {"head_dim": 128},
    "ministral": {"sliding_window": 4096},
    "cwm": {"head_dim": 128, "sliding_window": 8192},
    "dots1": {"sliding_window": 4096, "rms_norm_eps": 1e-6},
    "olmoe": {"rms_norm_eps": 1e-5},
    "flex_olmo": {"rms_norm_eps": 1e-6},
    "apertus": {"rms_norm_eps": 1e-5},
    "ministral3": {"head_dim": 128},
    "granitemoehybrid": {"attention_multiplier": 1.0},
    "jais2": {"attention_bias": True},
    "minimax_m2": {"head_dim": 128, "rms_norm_eps": 1e-6},
    "hy_v3": {"head_dim": 128, "rms_norm_eps": 1e-5},
    "falcon_h1": {"key_multiplier": 1.0},
    "bamba": {"partial_rotary_factor": 0.5},
    "apertus1p5_text": {"rms_norm_eps": 1e-5},
    "kolibri1": {"head_dim": 128, "sliding_window": 513, "rms_norm_eps": 1e-6},
    "olmo_hybrid": {"rms_norm_eps": 1e-6},
    "lara_mini": {"head_dim": 128, "sliding_window": 512, "rms_norm_eps": 1e-6},
    "mellum": {"head_dim": 128, "sliding_window": 1024, "rms_norm_eps": 1e-6},
    "qwen2_moe": {"qkv_bias": True, "sliding_window": 4096, "rms_norm_eps": 1e-6},
    "lfm2": {"rms_norm_eps": 1e-5},
    "nemotron_h": {"head_dim": 128},
    "cohere2": {"sliding_window": 4096, "sliding_window_pattern": 4},
    "exaone4": {"sliding_window": 4096, "rms_norm_eps": 1e-5},
    "exaone_moe": {"sliding_window": 4096, "rms_norm_eps": 1e-5},
    "nemotron": {"partial_rotary_factor": 0.5},
    "vaultgemma": {"query_pre_attn_scalar": 256, "attn_logit_softcapping": 50.0,
                   "sliding_window": 4096, "head_dim": 256},
    "gemma2": {"query_pre_attn_scalar": 256, "attn_logit_softcapping": 50.0,
               "sliding_window": 4096, "head_dim": 256},
    "modernbert": {"local_attention": 128, "global_attn_every_n_layers": 3},
    "hunyuan_v1_dense": {"rms_norm_eps": 1e-5},
    "hunyuan_v1_moe": {"rms_norm_eps": 1e-5},
    "ultrabert": {"sliding_window": 128},
    "mobilebert": {"hidden_size": 512, "use_bottleneck": True, "intra_bottleneck_size": 128,
                   "use_bottleneck_attention": False, "key_query_shared_bottleneck": True},
    "recurrent_gemma": {"sliding_window": 2048, "partial_rotary_factor": 0.5,
                        "block_types": ["recurrent", "recurrent", "attention"],
                        "num_hidden_layers": 26},
}
"""What each family's transformers config assumes when its config.json leaves a key
out (an older or hand-written config): read as transformers would read it."""


ROPE_THETA = {"cohere": 500_000.0, "mixtral": 1_000_000.0, "smollm3": 2_000_000.0,
              "exaone": 500_000.0, "solar_open": 1_000_000.0, "helium": 100_000.0,
              "ernie4_5": 500_000.0, "cwm": 1_000_000.0, "flex_olmo": 500_000.0,
              "apertus": 12_000_000.0, "ernie4_5_moe": 500_000.0, "phimoe": 1_000_000.0,
              "gte": 160_000.0, "lfm2": 1_000_000.0, "apertus1p5_text": 12_000_000.0,
              "nomic_bert": 1000.0, "minimax_m2": 5_000_000.0, "hy_v3": 11_158_840.0,
              "jina_embeddings_v3": 20_000.0, "minimax": 1_000_000.0}
"""The RoPE theta of a family whose transformers config does not default it to 10000
(its ``default_theta``), read when config.json gives none."""


PARTIAL_ROTARY = ("gpt_neox", "gpt_neox_japanese", "phi", "stablelm", "phi3", "persimmon", "glm",
                  "glm4", "glm4_moe", "nemotron", "minimax_m2", "bamba", "recurrent_gemma")
"""Families whose attention turns only the first ``int(head_dim * factor)`` coordinates
(GPT-J does too, by its own ``rotary_dim``); the others apply the tables to whole heads."""


TRIO_MODULES = {"linear": ("q_proj", "k_proj", "v_proj"), "bert": ("query", "key", "value"),
                "distil": ("q_lin", "k_lin", "v_lin")}


QK_NORMS = {"qwen3": ("head", 0.0), "qwen3_moe": ("head", 0.0), "olmo2": ("layer", 0.0),
            "olmo3": ("layer", 0.0), "gemma3_text": ("head", 1.0), "dots1": ("head", 0.0),
            "olmoe": ("layer", 0.0), "flex_olmo": ("layer", 0.0), "glm4_moe": ("head", 0.0),
            "apertus": ("head", 0.0), "exaone4": ("head", 0.0), "exaone_moe": ("head", 0.0),
            "mellum": ("head", 0.0), "lfm2": ("head", 0.0), "apertus1p5_text": ("head", 0.0),
            "kolibri1": ("head", 0.0), "olmo_hybrid": ("layer", 0.0), "lara_mini": ("head", 0.0),
            "minimax_m2": ("layer", 0.0), "hy_v3": ("head", 0.0),
            "hunyuan_v1_dense": ("head", 0.0), "hunyuan_v1_moe": ("head", 0.0)}
"""The families whose Q and K pass a learned RMSNorm (``q_norm``/``k_norm``): over each
head alone or the layer's whole width, and the offset added to the weight."""


LAYER_NORMS = {
    "phi": ("qk_layernorm", NormFunction("head", 0.0, kind="layer",
                                         modules=("q_layernorm", "k_layernorm"), bias=True)),
    "persimmon": ("qk_layernorm", NormFunction("head", 0.0, kind="layer",
                                               modules=("q_layernorm", "k_layernorm"),
                                               bias=True)),
    "stablelm": ("qk_layernorm", NormFunction("head", 0.0, kind="layer",
                                              modules=("q_layernorm", "k_layernorm"),
                                              rows="modules")),
    "cohere": ("use_qk_norm", NormFunction("head", 0.0, kind="layer", rows="tensor")),
}
"""The families whose Q and K pass a learned LayerNorm over each head when the config's
key says so (eps: ``layer_norm_eps``): Phi's and Persimmon's ``nn.LayerNorm(head_dim)``
with a bias shared by the heads, StableLM's ``StableLmLayerNormPerHead`` (a LayerNorm
without bias per head, ``norms.{h}``) and Cohere's ``CohereLayerNorm((heads, head_dim))``
(a row of weights per head, no bias)."""


FULL_WIDTH_QK_LAYER_NORMS = {"esmc": NormFunction("layer", 1e-5, kind="layer")}
"""The families whose Q and K always pass a learned LayerNorm over a token's whole width
(no config key turns it on or off), with ``nn.LayerNorm``'s own eps (1e-5: the config
gives none) and no bias: ESMC's ``EsmcLayerNorm(hidden_size, bias=False)`` ``q_norm``,
``k_norm``. Built ``hidden_size`` wide, they run only when the query and key
projections are too: ``num_key_value_heads`` equal to ``num_attention_heads`` and
``head_dim`` equal to ``hidden_size / num_attention_heads`` (a config saying otherwise
is refused, naming the key)."""


RUNS_ONLY_WITH = {"xlm": {"is_encoder": True}, "flaubert": {"is_encoder": True}}
"""Config values without which a family's transformers model does not run (XLMModel and
FlaubertModel raise for a decoder): a config saying otherwise is refused, naming the key."""


EQUAL_KEYS = {"internlm3": ("attention_bias", "mlp_bias")}
"""Keys a family's config class refuses unequal (InternLM3Config: one bias setting for
every projection, ``qkv_bias`` as ``bias``): a config giving them apart is refused."""


MPT_ATTENTION = {"qk_ln": False, "prefix_lm": False, "attn_uses_sequence_id": False,
                 "alibi": True, "alibi_bias_max": 8, "attn_type": "multihead_attention"}
"""What transformers' MPT computes whatever its ``attn_config`` says: a config asking for
another value is refused (the checkpoint was trained for a function transformers does
not run)."""


LAYER_PATTERNS = {"gemma3_text": ("sliding_window_pattern", None, 1),
                  "olmo3": (None, 4, 1), "cohere2": ("sliding_window_pattern", None, 1),
                  "modernbert": ("global_attn_every_n_layers", None, 0),
                  "ultrabert": (None, 3, 1)}
"""How a family's config derives ``layer_types`` when it gives none: every N-th layer
is full and the others slide, N read from a key (Gemma3TextConfig's
``sliding_window_pattern``, default 6) or fixed (Olmo3Config: 4); layer ``i`` is full
when ``(i + offset) % N == 0`` (the third number: 1, the N-th layer; ModernBERT's 0, the
first)."""


TYPE_THETAS: dict[str, dict[str, tuple[str | None, float]]] = {
    "mellum": {"full_attention": (None, 500_000.0), "sliding_attention": (None, 10_000.0)},
    "gemma3_text": {"full_attention": ("rope_theta", 1_000_000.0),
                    "sliding_attention": ("rope_local_base_freq", 10_000.0)},
    "olmo3": {"full_attention": ("rope_theta", 500_000.0),
              "sliding_attention": (None, 500_000.0)},
    "modernbert": {"full_attention": ("global_rope_theta", 160_000.0),
                   "sliding_attention": ("local_rope_theta", 10_000.0)},
    "ultrabert": {"full_attention": (None, 2_560_000.0),
                  "sliding_attention": (None, 10_000.0)},
}
"""The families whose RoPE theta is per type of layer (``rope_parameters`` keyed by
``layer_types``' types): each type's flat spelling (``None``: none) and its default."""


ALIASES: dict[str, dict[str, str]] = {
    "lfm2": {"norm_eps": "rms_norm_eps"},
    "xglm": {"attention_heads": "num_attention_heads", "num_layers": "num_hidden_layers"},
    "exaone": {"num_layers": "num_hidden_layers", "layer_norm_epsilon": "rms_norm_eps"},
    "internlm3": {"qkv_bias": "attention_bias", "bias": "mlp_bias"},
    "xlm": {"emb_dim": "hidden_size"},
    "flaubert": {"emb_dim": "hidden_size"},
    "recurrent_gemma": {"attention_window_size": "sliding_window"},
}
"""A family's other spellings of a key (its config class's ``attribute_map``): read as
the key they stand for."""


SCALED_BY_DEFAULT = {"cwm": "llama3", "apertus": "llama3", "ministral3": "yarn",
                     "apertus1p5_text": "llama3"}
"""The families whose config class's own default RoPE is scaled: a config.json without
``rope_parameters`` is refused rather than guessed."""


QK_NORM_FLAGS = {"glm4_moe": "use_qk_norm"}
"""The families of :data:`QK_NORMS` whose norm is there only when a config key says so."""


CLIP_QKV = ("olmo",)
"""The families that clamp Q, K and V to ``clip_qkv`` when the config gives it, right after
the projections (OLMoE clamps after its q/k norm: refused by the key)."""


NULL_MULTIPLIER_IS_INVERSE_SQRT = {"hyperclovax": True}
"""The families whose config turns a null ``attention_multiplier`` into ``head_dim**-0.5``
(Granite's attention cannot run with it null)."""


SOFTCAP = ("gemma2", "vaultgemma")
"""The families that soft-cap their scores by ``attn_logit_softcapping``."""


ROPE_ON_SLIDING = {"cohere2": False, "exaone4": True, "exaone_moe": True, "kolibri1": True}
"""The families whose attention turns Q and K on its sliding layers only; ``True``: every
layer turns when the config has no window at all (EXAONE 4's ``sliding_window is None``)."""


HYBRID_LAYERS = {"jamba": ("linear_attention",), "granitemoehybrid": ("linear_attention",),
                 "lfm2": ("conv",), "olmo_hybrid": ("linear_attention",),
                 "lara_mini": ("linear_attention",), "minimax": ("linear_attention",),
                 "bamba": ("linear_attention",),
                 "nemotron_h": ("linear_attention", "mlp", "moe")}
"""The hybrid families whose ``layer_types`` also list layers that are not softmax
attention: a prefix naming one of those is refused."""


ROPE_BY_KEY = {"granitemoehybrid": ("position_embedding_type", "rope", ("nope",)),
               "esm": ("position_embedding_type", "rotary", ("absolute",))}
"""The families whose attention turns Q and K only when a config key has a value: the
key, that value, and the others it may have (null too), each turning nothing."""


STORED_ROPE = {"esm": "rotary_embeddings.inv_freq"}
"""The families whose RoPE frequencies are the checkpoint's own table, loaded as stored
(float16 where the model was saved so), not computed from ``rope_theta``: ESM's
``EsmModel.load_hook`` reads ``rotary_embeddings.inv_freq`` beside its encoder, else an
older checkpoint's first copy under a layer (``attention.self.``), for every layer
(:func:`~qkvcli.authoring.checkpoint.stored_table`). Its query scale before RoPE is the
scores' ``1/sqrt(d_k)`` up to one multiplication's rounding (RoPE is linear)."""


QK_NORM_MODULES = {"lfm2": ("q_layernorm", "k_layernorm"),
                   "hunyuan_v1_dense": ("query_layernorm", "key_layernorm"),
                   "hunyuan_v1_moe": ("query_layernorm", "key_layernorm")}
"""The families of :data:`QK_NORMS` whose norms' modules have other names."""


WINDOW_FLAGS = {"qwen2_moe": "use_sliding_window"}
"""The families whose sliding layers slide only when a config flag is on."""


ROTARY_DIM = ("minimax_m2",)
"""The families whose config may give the rotated width as ``rotary_dim`` (read as the
factor ``rotary_dim / head_dim`` when no ``partial_rotary_factor`` is given)."""


FORCED_FLAT_FACTOR = ("bamba",)
"""The families whose config class overwrites a flat ``partial_rotary_factor`` with its
own default (0.5): only ``rope_parameters.partial_rotary_factor`` is read."""


NEOX_ROPE = ("gpt_neox", "gpt_neox_japanese")
"""The families whose config reads GPT-NeoX's own RoPE spellings (``rotary_emb_base``,
``rotary_pct``, not a flat ``rope_theta`` or ``partial_rotary_factor``), and whose
attention ignores a config ``head_dim`` that only its RoPE table reads."""


OUT_BIAS_PARAMETERS = {"gpt_neox_japanese": "dense_bias"}
"""The families whose output projection's bias is a parameter of its own beside it
(added to the layer's output outside the module), held by the last layer alone:
GPT-NeoX Japanese's ``dense_bias`` (``use_bias`` only where ``layer_number ==
num_hidden_layers - 1``)."""


TWO_SIDED_WINDOWS = {"modernbert": ("local_attention", 2), "ultrabert": ("sliding_window", 1)}
"""The bidirectional families whose sliding layers see a two-sided window: the key and
what it is divided by to give the reach ``r`` on either side, where transformers' mask
(``create_bidirectional_sliding_window_mask``) lets query ``i`` see key ``j`` when
``|i - j| <= r``: ModernBERT's ``sliding_window`` is ``local_attention // 2``,
UltraBERT's is its own. The fixture's window is ``r + 1`` (``|i - j| < window``)."""


SCALING_ON_EVERY_TYPE = ("modernbert",)
"""The families of :data:`TYPE_THETAS` whose config applies a ``rope_scaling`` to every
layer type (ModernBertConfig updates both entries), not to the full layers only."""


FAMILY_REFUSED_KEYS = {
    "ultrabert": (("rope_theta", "a theta per layer type zipped with layer_types "
                   "(UltrabertConfig reads it as a list, and a number raises); give "
                   "rope_parameters per layer type"),
                  ("attention_windows", "a window per layer from which UltrabertConfig "
                   "derives layer_types and sliding_window; give those"),
                  ("rope_scaling", "a scaling UltrabertConfig does not read per layer type; "
                   "give rope_parameters per layer type")),
    "recurrent_gemma": (("layer_types", "derived from block_types (RecurrentGemmaConfig "
                         "cannot set it and ignores it); give block_types"),),
}
"""Config keys a family's config class reads in a way qkv does not follow: refused when
set, naming what they do."""


QK_NORM_AFTER_ROPE = ("hunyuan_v1_dense", "hunyuan_v1_moe")
"""The families of :data:`QK_NORMS` whose norm normalises the rotated Q and K (Hunyuan
V1: ``apply_rotary_pos_emb``, then ``query_layernorm`` and ``key_layernorm``)."""


ROPE_REFUSED_PARAMETERS = {
    model_type: ("alpha", "NTK alpha scaling (a fixed alpha stretching the base, which "
                 "HunYuan's rotary module computes as its own ntk_alpha type)")
    for model_type in QK_NORM_AFTER_ROPE}
"""RoPE parameters a family's rotary module reads that qkv does not compute: refused
when set in ``rope_parameters`` or ``rope_scaling``, naming them."""


BLOCK_TYPES = {"recurrent_gemma": ("block_types", "attention", ("recurrent",), 100)}
"""The hybrid families whose layers' kinds cycle through a config list: its key, the kind
that is softmax attention, the other kinds (a layer of those is refused, naming the key),
and how many times the config repeats the list (RecurrentGemmaConfig's
``(block_types * 100)[:num_hidden_layers]``: no layer past that is built)."""


DEFAULT_ROPE_ONLY = ("recurrent_gemma",)
"""The families whose rotary module computes the default RoPE alone (it raises for any
other ``rope_type``): a scaling is refused, naming the key."""


BOTTLENECKED = ("mobilebert",)
"""The families whose attention reads a bottleneck (MobileBERT's ``MobileBertLayer``):
its query and key read ``true_hidden_size``-wide inputs (``intra_bottleneck_size`` with
``use_bottleneck``, else ``hidden_size``; MobileBertConfig derives it and ignores a
stored one). With ``use_bottleneck`` and ``key_query_shared_bottleneck`` but without
``use_bottleneck_attention``, Q and K read the shared bottleneck's output and V reads the
layer's input (``hidden_size`` wide): the fixture's ``value_input``. Every other setting
gives Q, K and V one input (the bottleneck's, or the layer's); ``use_bottleneck`` with
neither of the two flags runs only when ``intra_bottleneck_size`` is ``hidden_size``."""

"""A model's shape from its Hugging Face config.json, and the parameters it reads per token.

Counted per layer from the config (docs/decode.md, "Parameter count"): attention (standard
grouped-query attention, or DeepSeek's multi-head latent attention, MLA), the MLP (gated:
gate, up and down projections), MoE layers (router, routed and shared experts), the norms,
the embedding and, untied, the LM head. Multi-token-prediction layers (DeepSeek-V3's and
GLM-4.5's `num_nextn_predict_layers`) are not counted: decoding without them does not read them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class DecodeInputError(ValueError):
    """An input that makes no sense: which field, and how to fix it."""

    def __init__(self, field: str, problem: str, fix: str) -> None:
        super().__init__(f"{field}: {problem}; {fix}")
        self.field = field
        self.problem = problem
        self.fix = fix


class ModelShape(BaseModel):
    """What the decode model needs of a transformer (counts, not weights)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    architecture: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool = False
    experts: int = 0
    shared_experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_expert_intermediate: int = 0
    dense_layers: int = 0
    moe_layers: int = 0
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    attention_bias: bool = False
    qk_norm: bool = False
    expert_bias: bool = False
    attention_sinks: bool = False

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank is not None

    def attention_params(self) -> int:
        """One layer's attention weights."""
        h = self.hidden
        if self.mla:
            assert self.kv_lora_rank is not None
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * self.heads * qk
            else:
                q = h * self.heads * qk
            kv = (h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
                  + self.kv_lora_rank * self.heads * (self.qk_nope_head_dim + self.v_head_dim))
            return q + kv + self.heads * self.v_head_dim * h
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        params = h * q + 2 * h * kv + q * h
        if self.attention_bias:
            params += q + 2 * kv + (h if self.attention_sinks else 0)
        if self.qk_norm:
            params += 2 * self.head_dim
        if self.attention_sinks:
            params += self.heads
        return params

    def _expert(self, intermediate: int) -> int:
        gated = 3 * self.hidden * intermediate
        return gated + (2 * intermediate + self.hidden if self.expert_bias else 0)

    def _moe_layer(self, experts: int) -> int:
        router = self.hidden * self.experts + (self.experts if self.expert_bias else 0)
        shared = 3 * self.hidden * self.shared_expert_intermediate
        return router + experts * self._expert(self.expert_intermediate) + shared

    def _body(self, routed: int) -> int:
        dense_layers = self.layers - self.moe_layers
        per_layer = self.attention_params() + 2 * self.hidden
        mlp = dense_layers * 3 * self.hidden * self.intermediate
        moe = self.moe_layers * self._moe_layer(routed) if self.moe_layers else 0
        return self.layers * per_layer + mlp + moe + self.hidden

    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    def lm_head_params(self) -> int:
        """The LM head's own weights (none when tied to the embedding)."""
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    def total_params(self) -> int:
        """Every weight: what a model card calls the total."""
        return self._body(self.experts) + self.embedding_params() + self.lm_head_params()

    def active_params(self) -> int:
        """The weights one token uses (routed experts: only the top-k): a card's "active"."""
        return self._body(self.experts_per_token) + self.embedding_params() + self.lm_head_params()

    def read_params(self) -> int:
        """The weights one decode step reads: the active ones less the embedding table, of
        which one row is read (a tied embedding is read whole, as the LM head)."""
        active = self.active_params()
        return active if self.tied_embeddings else active - self.embedding_params()

    def kv_bytes_per_token(self, dtype_bytes: float) -> float:
        """KV-cache bytes one token of context adds (all layers): K and V of each KV head, or
        MLA's latent (kv_lora_rank) plus its rotary key (qk_rope_head_dim)."""
        if self.mla:
            assert self.kv_lora_rank is not None
            return self.layers * (self.kv_lora_rank + self.qk_rope_head_dim) * dtype_bytes
        return self.layers * 2 * self.kv_heads * self.head_dim * dtype_bytes


def _get(config: dict[str, Any], *names: str, default: Any = None) -> Any:
    for name in names:
        if config.get(name) is not None:
            return config[name]
    return default


def _int(config: dict[str, Any], names: tuple[str, ...], low: int, high: int,
         default: int | None = None) -> int:
    value = _get(config, *names, default=default)
    if value is None:
        raise DecodeInputError(names[0], "not in config.json",
                               "give the model's own config.json (--config FILE)")
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise DecodeInputError(names[0], f"{value!r} is not a whole number in {low}..{high}",
                               "give the model's own, unedited config.json")
    return value


def _moe_layers(config: dict[str, Any], layers: int, dense: int, experts: int) -> int:
    if not experts:
        return 0
    freq = _get(config, "moe_layer_freq", "decoder_sparse_step", default=1)
    if not isinstance(freq, int) or freq < 1:
        freq = 1
    only_dense = set(_get(config, "mlp_only_layers", default=[]) or [])
    if "decoder_sparse_step" in config:   # Qwen MoE: layer i is sparse when (i + 1) % step == 0
        return sum(1 for i in range(layers) if (i + 1) % freq == 0 and i not in only_dense)
    return sum(1 for i in range(dense, layers) if i % freq == 0)


def shape_from_config(config: dict[str, Any]) -> ModelShape:
    """The shape of a Hugging Face config.json (a multimodal one: its text_config)."""
    if not isinstance(config, dict):
        raise DecodeInputError("config", "not a JSON object", "give the model's config.json")
    if "num_hidden_layers" not in config and isinstance(config.get("text_config"), dict):
        config = {**config, **config["text_config"]}
    archs = config.get("architectures") or [config.get("model_type") or "unknown"]
    layers = _int(config, ("num_hidden_layers", "n_layer", "num_layers"), 1, 1000)
    hidden = _int(config, ("hidden_size", "n_embd", "d_model"), 1, 1_000_000)
    heads = _int(config, ("num_attention_heads", "n_head"), 1, 10_000)
    kv_heads = _int(config, ("num_key_value_heads",), 1, heads, default=heads)
    if heads % kv_heads:
        raise DecodeInputError("num_key_value_heads", f"{kv_heads} does not divide the "
                               f"{heads} attention heads", "give the model's own config.json")
    head_dim = _int(config, ("head_dim",), 1, 100_000, default=hidden // heads or None)
    vocab = _int(config, ("vocab_size",), 1, 10_000_000)
    experts = _int(config, ("n_routed_experts", "num_local_experts", "num_experts"), 0, 100_000,
                   default=0)
    per_token = _int(config, ("num_experts_per_tok", "experts_per_token", "moe_topk"), 0,
                     max(experts, 0), default=0) if experts else 0
    if experts and not per_token:
        raise DecodeInputError("num_experts_per_tok", "missing or 0 in a MoE config",
                               "give the model's own config.json")
    intermediate = _int(config, ("intermediate_size", "ffn_hidden_size", "n_inner"), 1,
                        10_000_000)
    expert_inter = _int(config, ("moe_intermediate_size",), 1, 10_000_000,
                        default=intermediate) if experts else 0
    shared = _int(config, ("n_shared_experts", "num_shared_experts"), 0, 1000, default=0)
    shared_inter = _int(config, ("shared_expert_intermediate_size",), 0, 10_000_000,
                        default=shared * expert_inter)
    dense = _int(config, ("first_k_dense_replace",), 0, layers, default=0) if experts else 0
    kv_lora = _get(config, "kv_lora_rank")
    model_type = str(config.get("model_type", ""))
    return ModelShape(
        architecture=str(archs[0]), layers=layers, hidden=hidden, heads=heads,
        kv_heads=kv_heads, head_dim=head_dim, intermediate=intermediate, vocab=vocab,
        tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        experts=experts, shared_experts=shared, experts_per_token=per_token,
        expert_intermediate=expert_inter, shared_expert_intermediate=shared_inter,
        dense_layers=dense, moe_layers=_moe_layers(config, layers, dense, experts),
        kv_lora_rank=_int(config, ("kv_lora_rank",), 1, 1_000_000) if kv_lora else None,
        q_lora_rank=_int(config, ("q_lora_rank",), 1, 1_000_000) if _get(config, "q_lora_rank")
        else None,
        qk_rope_head_dim=_int(config, ("qk_rope_head_dim",), 0, 100_000, default=0),
        qk_nope_head_dim=_int(config, ("qk_nope_head_dim",), 0, 100_000, default=0),
        v_head_dim=_int(config, ("v_head_dim",), 0, 100_000, default=0),
        attention_bias=bool(config.get("attention_bias", model_type == "qwen2")
                            or model_type == "qwen2_moe"),
        qk_norm=model_type.startswith("qwen3") or bool(config.get("use_qk_norm", False)),
        expert_bias=model_type == "gpt_oss", attention_sinks=model_type == "gpt_oss",
    )


BITS = {"awq": 4, "gptq": 4, "mxfp4": 4.25, "fp8": 8, "compressed-tensors": None,
        "bitsandbytes": None}
DTYPES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0, "float8_e4m3fn": 1.0}


def dtype_bytes_from_config(config: dict[str, Any]) -> tuple[float | None, str]:
    """Bytes per weight as stored: from quantization_config (bits / 8; MXFP4: 4 bits and one
    8-bit scale per 32 = 4.25 bits), else torch_dtype / dtype; None when neither says."""
    quant = config.get("quantization_config")
    if isinstance(quant, dict):
        method = str(quant.get("quant_method", "")).lower()
        bits = quant.get("bits", quant.get("weight_bits"))
        if quant.get("load_in_4bit"):
            bits = 4
        elif quant.get("load_in_8bit"):
            bits = 8
        if not isinstance(bits, (int, float)) or isinstance(bits, bool):
            bits = BITS.get(method)
        if isinstance(bits, (int, float)) and 1 <= bits <= 32:
            return bits / 8, f"quantization_config ({method or 'bits'}: {bits} bits)"
        return None, f"quantization_config ({method or 'unknown method'}: bits not stated)"
    dtype = _get(config, "torch_dtype", "dtype")
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype], f"torch_dtype {dtype}"
    return None, "neither quantization_config nor torch_dtype"

"""A GGUF file's header, read from its first bytes (pure; the node reads HEAD_BYTES).

The format (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md): magic "GGUF", a uint32
version (2 and 3: uint64 counts; 1: uint32 counts), the tensor count, the key-value count, then
each key (a string: uint64 length, UTF-8 bytes), a uint32 value type and the value (arrays: a
uint32 element type, a uint64 length, the elements), then the tensor infos (name, uint32 number
of dimensions, uint64 each dimension, uint32 ggml type, uint64 offset). Little-endian, or
big-endian where the version reads byte-swapped. A buffer that ends early gives what it holds
with truncated=True.
"""

from __future__ import annotations

import struct

from pydantic import BaseModel, ConfigDict

from gpunode.decode.shape import DecodeInputError, ModelShape, shape_from_config

SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
           12: "d"}
TYPE_NAMES = {0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32",
              6: "float32", 7: "bool", 8: "string", 9: "array", 10: "uint64", 11: "int64",
              12: "float64"}
MAX_TENSORS = 100_000
HEAD_BYTES = 262144
"""What the audit's node read takes of a .gguf file: llama.cpp's converter writes general.* and
the {arch}.* hyperparameters first, then the tokenizer's arrays, whose lengths come before
their elements (tests/unit/decode/test_gguf_real.py cuts a real file there)."""


class GgufHeader(BaseModel):
    """The header: scalar keys as values, arrays as {"array": element type, "length": n}."""

    model_config = ConfigDict(extra="forbid")

    version: int
    architecture: str | None
    file_type: int | None
    tensor_count: int
    kv_count: int
    kv: dict[str, object]
    tensors: dict[str, list[int]] = {}
    truncated: bool


class _Truncated(Exception):
    def __init__(self, partial: object = None) -> None:
        super().__init__()
        self.partial = partial
        """What the cut value holds (an array's type and length, read before its elements)."""


class _Reader:
    def __init__(self, data: bytes, endian: str) -> None:
        self.data, self.pos, self.endian = data, 0, endian

    def take(self, fmt: str) -> object:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise _Truncated
        (value,) = struct.unpack_from(self.endian + fmt, self.data, self.pos)
        self.pos += size
        return value

    def count(self, fmt: str = "Q") -> int:
        value = self.take(fmt)
        assert isinstance(value, int)
        return value

    def string(self) -> str:
        size = self.count()
        if self.pos + size > len(self.data):
            raise _Truncated
        raw = self.data[self.pos:self.pos + size]
        self.pos += size
        return raw.decode("utf-8", errors="replace")

    def value(self, kind: int) -> object:
        if kind == 8:
            return self.string()
        if kind == 9:
            element, length = self.count("I"), self.count()
            array = {"array": TYPE_NAMES.get(element, str(element)), "length": length}
            try:
                for _ in range(length):
                    self.value(element)
            except _Truncated:
                raise _Truncated(array) from None
            return array
        if kind not in SCALARS:
            raise DecodeInputError("gguf", f"unknown value type {kind}",
                                   "give an unmodified GGUF file (v2 or v3)")
        return self.take(SCALARS[kind])


def parse_gguf_header(data: bytes) -> GgufHeader:
    """The header in data (the file's first bytes); DecodeInputError when it is not GGUF."""
    if data[:4] != b"GGUF":
        raise DecodeInputError("gguf", "no GGUF magic at the file's start",
                               "give a .gguf model file (--gguf FILE)")
    if len(data) < 8:
        return GgufHeader(version=0, architecture=None, file_type=None, tensor_count=0,
                          kv_count=0, kv={}, truncated=True)
    little = struct.unpack_from("<I", data, 4)[0]
    endian = "<" if little < 0x10000 else ">"
    reader = _Reader(data, endian)
    reader.pos = 4
    version = reader.count("I")
    if version not in (1, 2, 3):
        raise DecodeInputError("gguf", f"version {version}", "give a GGUF v2 or v3 file")
    wide = "Q" if version > 1 else "I"
    kv: dict[str, object] = {}
    tensors: dict[str, list[int]] = {}
    tensor_count = kv_count = 0
    truncated = False
    try:
        tensor_count, kv_count = reader.count(wide), reader.count(wide)
        for _ in range(kv_count):
            key = reader.string()
            try:
                kv[key] = reader.value(reader.count("I"))
            except _Truncated as cut:
                if cut.partial is not None:
                    kv[key] = cut.partial
                raise
        for _ in range(min(tensor_count, MAX_TENSORS)):
            name = reader.string()
            dims = [reader.count(wide) for _ in range(reader.count("I"))]
            reader.count("I")
            reader.count()
            tensors[name] = dims
    except _Truncated:
        truncated = True
    arch = kv.get("general.architecture")
    file_type = kv.get("general.file_type")
    return GgufHeader(version=version, architecture=arch if isinstance(arch, str) else None,
                      file_type=file_type if isinstance(file_type, int) else None,
                      tensor_count=tensor_count, kv_count=kv_count, kv=kv, tensors=tensors,
                      truncated=truncated)


def _key(header: GgufHeader, name: str, default: int | None = None) -> int:
    value = header.kv.get(f"{header.architecture}.{name}", default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DecodeInputError(f"gguf {header.architecture}.{name}",
                               "not in the header (or not a count)",
                               "give the model's config.json instead (--config FILE)")
    return value


def shape_from_gguf(header: GgufHeader) -> ModelShape:
    """The model's shape from the llama.cpp keys (see config_from_gguf)."""
    return shape_from_config(config_from_gguf(header))


def config_from_gguf(header: GgufHeader) -> dict[str, object]:
    """The header's llama.cpp keys ({arch}.block_count, ...) as a config.json's keys
    (gpunode.decode.shape reads them); the vocabulary is the length of tokenizer.ggml.tokens;
    tied when the tensors are read and hold no output.weight (a header cut before its tensor
    infos counts the LM head apart: an upper bound by vocab x hidden weights). Raises
    DecodeInputError naming the first key that is missing."""
    if not header.architecture:
        raise DecodeInputError("gguf general.architecture", "not in the header",
                               "give the model's config.json instead (--config FILE)")
    hidden = _key(header, "embedding_length")
    heads = _key(header, "attention.head_count")
    tokens = header.kv.get("tokenizer.ggml.tokens")
    vocab = tokens.get("length") if isinstance(tokens, dict) else None
    experts = _key(header, "expert_count", 0)
    kv_lora = header.kv.get(f"{header.architecture}.attention.kv_lora_rank")
    rope = _key(header, "rope.dimension_count", 0)
    layers = _key(header, "block_count")
    dense = _key(header, "leading_dense_block_count", 0) if experts else 0
    intermediate = _key(header, "feed_forward_length")
    config: dict[str, object] = {
        "architectures": [header.architecture], "num_hidden_layers": layers,
        "hidden_size": hidden, "num_attention_heads": heads,
        "num_key_value_heads": _key(header, "attention.head_count_kv", heads) or heads,
        "head_dim": _key(header, "attention.key_length", hidden // heads if heads else 0),
        "intermediate_size": intermediate,
        "vocab_size": vocab if isinstance(vocab, int) else _key(header, "vocab_size"),
        "tie_word_embeddings": bool(header.tensors) and "output.weight" not in header.tensors,
    }
    if experts:
        config.update(num_local_experts=experts,
                      num_experts_per_tok=_key(header, "expert_used_count"),
                      moe_intermediate_size=_key(header, "expert_feed_forward_length",
                                                 intermediate),
                      n_shared_experts=_key(header, "expert_shared_count", 0),
                      first_k_dense_replace=dense)
    if isinstance(kv_lora, int) and kv_lora:
        q_lora = header.kv.get(f"{header.architecture}.attention.q_lora_rank")
        config.update(kv_lora_rank=kv_lora, q_lora_rank=q_lora, qk_rope_head_dim=rope,
                      qk_nope_head_dim=_key(header, "attention.key_length", 0) - rope,
                      v_head_dim=_key(header, "attention.value_length", 0))
    return config

"""What an engine's own flags make of the bytes the decode step reads (pure).

- `kv_bytes(engine, kv_cache_dtype, dtype)`: bytes of one KV-cache element. vLLM/SGLang
  `--kv-cache-dtype` (auto: the model dtype the engine runs, 2 bytes unless `--dtype float32`;
  fp8, fp8_e4m3, fp8_e5m2, fp8_inc: 1 byte); llama.cpp `-ctk` sets the K cache only (ggml's
  block sizes: q8_0 34 bytes a 32-element block, q4_0 18, q4_1 20, q5_0 22, q5_1 24, iq4_nl 18;
  ggml/src/ggml-common.h), its V cache staying f16 (llama.cpp's `-ctv` default).
- `engine_weight_bytes(engine settings, config.json)`: bytes a weight is held in on the GPU
  when the flags make it differ from the checkpoint on disk (then the files' size is not what
  a step reads): `--quantization fp8` on a checkpoint without `quantization_config` (vLLM's
  and SGLang's online FP8: each weight quantized to 1 byte at load), `--dtype` of another
  width than the checkpoint's `torch_dtype`, and `auto` on an FP32 checkpoint (vLLM and
  SGLang run FP32 checkpoints in FP16: their `--dtype` help). None: the files count as stored.
"""

from __future__ import annotations

from typing import Any

FLOAT_BYTES = {"float32": 4.0, "float": 4.0, "f32": 4.0, "float16": 2.0, "half": 2.0,
               "f16": 2.0, "fp16": 2.0, "bfloat16": 2.0, "bf16": 2.0}
FP8 = {"fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "fp8_inc": 1.0}
GGML_BLOCKS = {"q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32, "q5_0": 22 / 32,
               "q5_1": 24 / 32, "iq4_nl": 18 / 32}
ONLINE_QUANT = {"fp8": 1.0}
"""--quantization methods that quantize a 16-bit checkpoint at load (bytes a weight)."""


def _model_dtype_bytes(dtype: str | None) -> float:
    """The dtype vLLM/SGLang run: --dtype's width, else 2 (auto: FP16/BF16)."""
    return FLOAT_BYTES.get((dtype or "auto").lower(), 2.0) if dtype else 2.0


def kv_bytes(engine: str, kv_cache_dtype: str | None, dtype: str | None = None,
             flag: str = "--kv-cache-dtype") -> tuple[float | None, str]:
    """(bytes of one KV element, where that comes from); None: a dtype not known here."""
    value = (kv_cache_dtype or "auto").lower()
    if engine == "llama.cpp":
        k = 2.0 if value == "auto" else FLOAT_BYTES.get(value) or GGML_BLOCKS.get(value)
        if k is None:
            return None, f"{flag} {kv_cache_dtype}: not a cache type gpunode knows"
        said = f"{flag} {kv_cache_dtype}" if kv_cache_dtype else "llama.cpp default f16"
        return (k + 2.0) / 2, (f"{said} (K cache, {k:g} bytes); V cache f16 (llama.cpp's -ctv "
                               "default; -ctv is not read)")
    if value == "auto":
        said = f"{flag} auto" if kv_cache_dtype else f"engine default ({flag} auto)"
        width = _model_dtype_bytes(dtype)
        return width, f"{said}: the model dtype the engine runs, {width:g} bytes"
    if value in FP8:
        return FP8[value], f"{flag} {kv_cache_dtype}"
    if value in FLOAT_BYTES:
        return FLOAT_BYTES[value], f"{flag} {kv_cache_dtype}"
    return None, f"{flag} {kv_cache_dtype}: not a KV cache dtype gpunode knows"


def engine_weight_bytes(quantization: str | None, dtype: str | None,
                        config: dict[str, Any] | None, quantization_flag: str = "--quantization",
                        dtype_flag: str = "--dtype") -> tuple[float | None, str]:
    """(bytes a weight is held in, why) when the engine's --quantization / --dtype change it
    from the checkpoint on disk; (None, "") when the files' bytes are what a step reads."""
    if config is None or isinstance(config.get("quantization_config"), dict):
        return None, ""
    if quantization and quantization.lower() in ONLINE_QUANT:
        return ONLINE_QUANT[quantization.lower()], (
            f"{quantization_flag} {quantization}: weights quantized to 1 byte at load (the "
            "checkpoint has no quantization_config)")
    stored = FLOAT_BYTES.get(str(config.get("torch_dtype") or config.get("dtype") or ""))
    wanted = (dtype or "auto").lower()
    if wanted == "auto":
        if stored == 4.0:
            return 2.0, f"{dtype_flag} auto: the engine runs an FP32 checkpoint in FP16 (2 bytes)"
        return None, ""
    held = FLOAT_BYTES.get(wanted)
    if held is not None and held != stored:
        return held, f"{dtype_flag} {dtype}: weights held in {held:g} bytes"
    return None, ""

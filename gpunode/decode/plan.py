"""The decode step's inputs for planning without a node (``python -m gpunode decode``).

Pure: the caller reads the files; this turns a config.json (or a GGUF header) and the
command line's values into DecodeInputs, each value with where it came from.
"""

from __future__ import annotations

from typing import Any

from gpunode.decode.gguf import GgufHeader, shape_from_gguf
from gpunode.decode.gpus import lookup_gpu
from gpunode.decode.shape import ModelShape, dtype_bytes_from_config, shape_from_config
from gpunode.decode.step import GPU_HOW, DecodeInputs

KV_ASSUMED = ("assumed: 2 bytes (the engines' default KV cache dtype, auto = the model's "
              "bf16/fp16)")
LINKS = ("NV1", "NV2", "NV4", "NV8", "NV12", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS")


def plan_inputs(model: dict[str, Any] | GgufHeader, model_source: str, gpu_name: str,
                gpus: int | None = None, tp: int = 1, weights_bytes: int | None = None,
                allreduce_us: float | None = None, context: int = 1024, eager: bool = False,
                link: str | None = None) -> DecodeInputs:
    """DecodeInputs from a model's config.json (a dict) or GGUF header and the flags' values;
    raises DecodeInputError on a model file with nonsense values."""
    shape: ModelShape
    sources = {"model_config": model_source, "tp": "--tp", "context": "--context",
               "eager": "--eager", "kv_dtype_bytes": KV_ASSUMED}
    per_param: float | None = None
    if isinstance(model, GgufHeader):
        shape = shape_from_gguf(model)
    else:
        shape = shape_from_config(model)
        per_param, where = dtype_bytes_from_config(model)
        sources["weight_bytes_per_param"] = f"{model_source}: {where}"
    missing: dict[str, str] = {}
    gpu = lookup_gpu(gpu_name)
    if gpu is None:
        missing["gpu"] = f"GPU {gpu_name!r} is not in the table: {GPU_HOW}"
    sources["gpu"] = "--gpu"
    sources["gpu_count"] = "--gpus" if gpus is not None else "--tp (no --gpus given)"
    if weights_bytes is not None:
        sources["weights_bytes"] = "--weights-bytes"
    if allreduce_us is not None:
        sources["allreduce_us"] = "measured: --allreduce-us"
    if link is not None:
        sources["link"] = "--link"
    return DecodeInputs(shape=shape, weights_bytes=weights_bytes,
                        weight_bytes_per_param=None if weights_bytes else per_param, gpu=gpu,
                        gpu_count=gpus if gpus is not None else tp, tp=tp, context=context,
                        eager=eager, link=link, allreduce_us=allreduce_us, sources=sources,
                        missing=missing)

"""One decode step at batch 1: its terms, the ceiling (1 / their sum) and the binding term.

    t_weights = bytes of weights each GPU reads per token / its memory bandwidth
    t_kv      = KV-cache bytes each GPU reads per token at `context` tokens / its bandwidth
    t_comm    = 2 all-reduces a layer under TP > 1 x the time of one (measured, else assumed)
    t_launch  = kernels per token x the launch cost of one, in eager mode (no CUDA graphs)

docs/decode.md gives the model, each constant's source and the validation against published
single-stream figures. A missing input gives no ceiling and says how to supply it.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from gpunode.decode.gpus import GpuSpec
from gpunode.decode.shape import ModelShape

TERMS = ("weights", "kv", "comm", "launch")
LETTERS = {"weights": "W", "kv": "K", "comm": "C", "launch": "L"}

# One all-reduce of a batch-1 activation (hidden x 2 bytes, 4-16 KiB) between 2 GPUs, in us,
# by the link nvidia-smi topo -m names (docs/decode.md, "All-reduce defaults"). ASSUMED
# figures of the order nccl-tests prints for small messages; each doubling of the GPUs adds
# one more of it (log2 of the count: tree / one-shot algorithms). A measured allreduce_us
# always replaces them.
ALLREDUCE_US = {"NV": 8.0, "PIX": 15.0, "PXB": 18.0, "PHB": 25.0, "NODE": 30.0, "SYS": 40.0}
NO_P2P_FACTOR = 2.0   # assumed: without P2P each hop is staged through host memory (2 copies)

# Eager mode (CUDA graphs off): each kernel pays the host's launch path (docs/decode.md,
# "Launch"). Per layer: 2 norms, QKV, rotary, cache write, attention, O, gate-up, activation,
# down, 2 residual adds = 12; plus embedding, final norm, LM head, sampling = 4 a token.
LAUNCH_US = 5.0
KERNELS_PER_LAYER = 12
KERNELS_PER_TOKEN = 4

MODEL_HOW = ("--config FILE (the model's config.json, or its .gguf file); on a node the "
             "profile key decode_model_config (the config.json's path on the node)")
GPU_HOW = ("--gpu \"NAME\" (the name nvidia-smi prints, one of gpunode/decode/gpus.yaml); on a "
           "node the profile key decode_gpu_bandwidth_gb_s (the GPU's memory bandwidth)")


class Sourced(BaseModel):
    """A value and where it was read (or "assumed: why")."""

    value: float | int | str | bool | None
    source: str


class DecodeInputs(BaseModel):
    """What the step needs; `sources` says where each was read, `missing` how to give one."""

    model_config = ConfigDict(extra="forbid")

    shape: ModelShape | None = None
    weights_bytes: int | None = Field(default=None, ge=0)
    weight_bytes_per_param: float | None = Field(default=None, gt=0, le=8)
    gpu: GpuSpec | None = None
    bandwidth_gb_s: float | None = Field(default=None, gt=0, le=20000)
    """One GPU's memory bandwidth given (profile decode_gpu_bandwidth_gb_s): wins over the
    GPU table's, and stands in for a GPU not in it."""
    gpu_count: int | None = Field(default=None, ge=0, le=1024)
    tp: int = Field(default=1, ge=1, le=1024)
    pp: int = Field(default=1, ge=1, le=1024)
    ep: int = Field(default=1, ge=1, le=1024)
    context: int = Field(default=1024, ge=0, le=100_000_000)
    kv_dtype_bytes: float = Field(default=2, gt=0, le=8)
    eager: bool = False
    link: str | None = Field(default=None, pattern=r"^(?:NV\d{1,2}|PIX|PXB|PHB|NODE|SYS)$")
    p2p: bool | None = None
    allreduce_us: float | None = Field(default=None, gt=0, le=1_000_000)
    sources: dict[str, str] = {}
    missing: dict[str, str] = {}


class DecodeResult(BaseModel):
    ceiling_tokens_per_s: float | None
    terms_ms: dict[str, float | None]
    binding: str | None
    inputs: dict[str, Sourced]
    missing: list[dict[str, str]]


def _link_class(link: str | None) -> str | None:
    if link is None:
        return None
    link = link.upper()
    return "NV" if link.startswith("NV") else link if link in ALLREDUCE_US else None


def allreduce_time_us(inputs: DecodeInputs) -> tuple[float | None, str]:
    """One all-reduce's time: measured, else the assumed default for the link and GPU count."""
    if inputs.allreduce_us is not None:
        return inputs.allreduce_us, inputs.sources.get("allreduce_us", "measured (given)")
    link = _link_class(inputs.link)
    if link is None:
        return None, "no link class"
    factor = NO_P2P_FACTOR if inputs.p2p is False and link != "NV" else 1.0
    value = ALLREDUCE_US[link] * factor * max(1.0, math.log2(inputs.tp))
    return value, (f"assumed: default for link {link}{' without P2P' if factor > 1 else ''} "
                   f"and {inputs.tp} GPUs (docs/decode.md, All-reduce defaults)")


def _weights_bytes(inputs: DecodeInputs) -> tuple[float | None, str]:
    """Bytes of weights one step reads (all GPUs together), scaled to the bytes stored."""
    shape = inputs.shape
    assert shape is not None
    share = shape.read_params() / shape.total_params()
    if inputs.weights_bytes:
        return inputs.weights_bytes * share, "weights_bytes x read/total params"
    if inputs.weight_bytes_per_param:
        return (shape.read_params() * inputs.weight_bytes_per_param,
                "read params x weight_bytes_per_param")
    return None, ""


def _missing(inputs: DecodeInputs) -> list[dict[str, str]]:
    missing = [{"input": k, "how": v} for k, v in inputs.missing.items()]
    named = {m["input"] for m in missing}

    def add(name: str, how: str) -> None:
        if name not in named:
            missing.append({"input": name, "how": how})
            named.add(name)

    if inputs.shape is None:
        add("model_config", MODEL_HOW)
    if inputs.gpu is None and inputs.bandwidth_gb_s is None:
        add("gpu", GPU_HOW)
    if inputs.shape is not None and not inputs.weights_bytes and not inputs.weight_bytes_per_param:
        add("weights_bytes", "--weights-bytes N (all weight files' bytes, every shard), or a "
                             "config.json that states torch_dtype or quantization_config")
    if inputs.gpu_count is not None and inputs.tp * inputs.pp > inputs.gpu_count:
        add("tp", f"TP x PP = {inputs.tp * inputs.pp} is more than the {inputs.gpu_count} GPUs: "
                  "give --tp N (and --gpus N) with TP x PP <= GPUs")
    if inputs.tp > 1 and allreduce_time_us(inputs)[0] is None:
        add("allreduce_us", "--allreduce-us X (nccl-tests all_reduce_perf at the hidden size "
                            "x 2 bytes), or the GPUs' link (nvidia-smi topo -m)")
    return missing


def _inputs(inputs: DecodeInputs) -> dict[str, Sourced]:
    src = inputs.sources
    out: dict[str, Sourced] = {}

    def put(name: str, value: float | int | str | bool | None, default: str) -> None:
        out[name] = Sourced(value=value, source=src.get(name, default))

    shape = inputs.shape
    if shape is not None:
        cfg = src.get("model_config", "config.json")
        put("architecture", shape.architecture, cfg)
        put("total_params", shape.total_params(), f"counted from {cfg}")
        put("active_params", shape.active_params(), f"counted from {cfg}")
        put("read_params_per_token", shape.read_params(), f"counted from {cfg}")
        put("kv_bytes_per_token", shape.kv_bytes_per_token(inputs.kv_dtype_bytes),
            f"counted from {cfg}")
    put("weights_bytes", inputs.weights_bytes, "weight files' sizes")
    put("weight_bytes_per_param", inputs.weight_bytes_per_param, "config.json")
    if inputs.gpu is not None:
        put("gpu", inputs.gpu.name, "nvidia-smi")
    if inputs.bandwidth_gb_s is not None:
        put("memory_bandwidth_gb_s", inputs.bandwidth_gb_s, "given")
    elif inputs.gpu is not None:
        put("memory_bandwidth_gb_s", inputs.gpu.memory_bandwidth_gb_s,
            f"gpus.yaml: {inputs.gpu.source}")
    put("gpu_count", inputs.gpu_count, "nvidia-smi")
    for name in ("tp", "pp", "ep", "context", "kv_dtype_bytes", "eager", "link", "p2p"):
        put(name, getattr(inputs, name), "default")
    if inputs.tp > 1:
        value, source = allreduce_time_us(inputs)
        out["allreduce_us"] = Sourced(value=value, source=source)
    if inputs.eager:
        put("launch_us_per_kernel", LAUNCH_US, "assumed: docs/decode.md, Launch")
    return out


def decode_step(inputs: DecodeInputs) -> DecodeResult:
    """The step's terms in ms, the ceiling in tokens/s and the binding term; a missing input
    leaves the terms it feeds None and the ceiling None."""
    missing = _missing(inputs)
    terms: dict[str, float | None] = dict.fromkeys(TERMS)
    shape, gpu = inputs.shape, inputs.gpu
    tp = inputs.tp
    given = inputs.bandwidth_gb_s or (gpu.memory_bandwidth_gb_s if gpu is not None else None)
    if shape is not None and given is not None:
        bandwidth = given * 1e9
        read, _ = _weights_bytes(inputs)
        if read is not None:
            terms["weights"] = read / tp / bandwidth * 1e3
        split = 1 if shape.mla else min(tp, shape.kv_heads)
        kv = inputs.context * shape.kv_bytes_per_token(inputs.kv_dtype_bytes) / split
        terms["kv"] = kv / bandwidth * 1e3
    if shape is not None:
        allreduce, _ = allreduce_time_us(inputs) if tp > 1 else (0.0, "")
        if allreduce is not None:
            terms["comm"] = 2 * shape.layers * allreduce / 1e3
        kernels = shape.layers * (KERNELS_PER_LAYER + (2 if tp > 1 else 0)) + KERNELS_PER_TOKEN
        terms["launch"] = kernels * LAUNCH_US / 1e3 if inputs.eager else 0.0
    known = [v for v in terms.values() if v is not None]
    ceiling = binding = None
    if not missing and len(known) == len(TERMS) and sum(known) > 0:
        ceiling = 1e3 / sum(known)
        binding = max(TERMS, key=lambda t: terms[t] or 0.0)
    return DecodeResult(ceiling_tokens_per_s=ceiling, terms_ms=terms, binding=binding,
                        inputs=_inputs(inputs), missing=missing)


def what_if(inputs: DecodeInputs, **changes: object) -> DecodeResult:
    """The step with some inputs changed (eager=False, p2p=True, allreduce_us=None, ...)."""
    sources = dict(inputs.sources)
    for name, value in changes.items():
        sources[name] = f"what if: {name} = {value}"
    if "allreduce_us" in changes and changes["allreduce_us"] is None:
        sources.pop("allreduce_us", None)
    updated = DecodeInputs.model_validate({**inputs.model_dump(), **changes, "sources": sources})
    return decode_step(updated)


def decode_json(result: DecodeResult, measured_tokens_per_s: float | None = None,
                window: str | None = None) -> dict[str, object]:
    """The report's "decode" object (JSON-ready)."""
    ceiling = result.ceiling_tokens_per_s
    efficiency = (measured_tokens_per_s / ceiling
                  if measured_tokens_per_s is not None and ceiling else None)
    out: dict[str, object] = {
        "ceiling_tokens_per_s": ceiling,
        "terms_ms": {t: result.terms_ms.get(t) for t in TERMS},
        "binding": result.binding,
        "measured_tokens_per_s": measured_tokens_per_s,
        "efficiency": efficiency,
        "inputs": {k: v.model_dump() for k, v in result.inputs.items()},
        "missing": list(result.missing),
    }
    if window is not None:
        out["window"] = window
    return out


def step_bar(result: DecodeResult, width: int = 60) -> str:
    """One plain-ASCII bar of the step split into its terms, and a legend naming the binding
    term, e.g. ``[WWWWWWWWWWKKCCCCCCCC] 13.7 ms a token: ceiling 73.0 tokens/s``."""
    if result.ceiling_tokens_per_s is None:
        lines = ["no decode ceiling: an input is missing"]
        lines += [f"  missing {m['input']}: {m['how']}" for m in result.missing]
        return "\n".join(lines)
    terms = {t: result.terms_ms[t] or 0.0 for t in TERMS}
    total = sum(terms.values())
    cells = {t: round(v / total * width) for t, v in terms.items()}
    bar = "".join(LETTERS[t] * cells[t] for t in TERMS)[:width].ljust(width, LETTERS[
        result.binding or "weights"])
    lines = [f"[{bar}] {total:.2f} ms a token: ceiling {result.ceiling_tokens_per_s:.1f} "
             "tokens/s (batch 1)"]
    for t in TERMS:
        mark = "  <- binds" if t == result.binding else ""
        lines.append(f"  {LETTERS[t]} {t:<8}{terms[t]:8.3f} ms {terms[t] / total:6.1%}{mark}")
    return "\n".join(lines)

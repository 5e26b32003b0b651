"""What the audit read feeds the decode model (issue 40), per engine process (pure).

`decode_inputs(snap, p)` gathers the inputs of gpunode.decode.step.DecodeInputs from the
snapshot: the GPUs (name and count, nvidia-smi), the link between the engine's GPUs and whether
P2P works (nvidia-smi topo -m / -p2p r), TP/PP, eager, the context (--max-model-len, else
ASSUMED_CONTEXT, stated "assumed"), the model's config.json and the weights' bytes on disk. Each
value says where it was read (`sources`); each input that could not be read says how to give
it (`missing`). `measured_tokens_per_s(numbers)` is the engine's own figure: 1 / its mean time
per output token (histogram sum / count), over the window "since engine start".
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from gpunode.decode.dtypes import engine_weight_bytes, kv_bytes
from gpunode.decode.gpus import lookup_gpu
from gpunode.decode.shape import DecodeInputError, dtype_bytes_from_config, shape_from_config
from gpunode.decode.step import (
    NO_P2P_FACTOR,
    DecodeInputs,
    decode_json,
    decode_step,
    step_bar,
    what_if,
)
from gpunode.facts.engine_metrics import EngineNumbers
from gpunode.facts.engine_model import CONFIG_BYTES, SPLIT_GGUF_NOTE
from gpunode.facts.engine_read import EngineProcess
from gpunode.profile.node import NodeProfile
from gpunode.roles.audit.snapshot import NodeSnapshot

ASSUMED_CONTEXT = 4096
"""Tokens of KV read per step when the engine's maximum length is not on its command line
(an assumption, said so in the report: a short chat turn's context)."""
WINDOW = "since engine start"
"""vLLM/SGLang histograms count from the engine's start: their sum / count is that mean."""
LINK_ORDER = ("SYS", "NODE", "PHB", "PXB", "PIX")
"""nvidia-smi topo -m's legend, slowest first; NV# (NVLink) is faster than all of them."""


def _link_rank(link: str) -> int:
    return LINK_ORDER.index(link) if link in LINK_ORDER else len(LINK_ORDER)


def engine_link(snap: NodeSnapshot, gpus: int) -> tuple[str | None, bool | None]:
    """(the slowest link class, P2P works on every pair) among GPUs 0..gpus-1; None: not read
    (one GPU has no link to cross)."""
    topo = snap.topology
    if topo is None or gpus < 2:
        return None, None
    pairs = [f"{a}-{b}" for a in range(gpus) for b in range(a + 1, gpus)]
    links = [topo.links[k] for k in pairs if k in topo.links]
    link = min(links, key=_link_rank) if len(links) == len(pairs) else None
    p2p_values = [topo.p2p_read[k] for k in pairs if k in topo.p2p_read]
    p2p = all(v == "OK" for v in p2p_values) if len(p2p_values) == len(pairs) else None
    return link, p2p


ACTIVATION_BYTES = 2
"""Bytes an activation element is all-reduced in: bf16/fp16, the engines' compute dtype (an fp8
model's activations are all-reduced in bf16 too)."""


def measured_allreduce(snap: NodeSnapshot, tp: int, hidden: int) -> tuple[float, str] | None:
    """(us, source) of one all-reduce of a batch-1 activation (hidden x 2 bytes), where the
    audit's active mode ran nccl-tests all_reduce_perf over as many GPUs as the engine's TP:
    the time at the smallest size measured that holds the message. None: not measured so (a
    run over another GPU count is another all-reduce; wrong results are no time)."""
    perf = snap.bandwidth.all_reduce if snap.bandwidth is not None else None
    if perf is None or perf.gpus != tp or perf.wrong:
        return None
    message = hidden * ACTIVATION_BYTES
    size = min((n for n in perf.times_us if n >= message), default=None)
    if size is None:
        return None
    return perf.times_us[size], (
        f"measured: nccl-tests all_reduce_perf at {size} bytes on {perf.gpus} GPUs (the audit's "
        f"active mode; the message: hidden {hidden} x {ACTIVATION_BYTES} bytes = {message})")


MODEL_KEY = "decode_model_config"
BANDWIDTH_KEY = "decode_gpu_bandwidth_gb_s"


def profile_config(snap: NodeSnapshot, profile: NodeProfile | None
                   ) -> tuple[dict[str, Any] | None, str]:
    """(the profile's decode_model_config as read on the node, or None and why not)."""
    path = profile.decode_model_config if profile is not None else None
    if path is None:
        return None, f"give {MODEL_KEY} (a config.json path on the node) in the profile"
    lines = snap.contents.get(path)
    if lines is None:
        return None, (f"the profile's {MODEL_KEY} {path} is not on the node: give the path "
                      "of a file there")
    text = "\n".join(lines)
    data: object = None
    if len(text) <= CONFIG_BYTES:
        try:
            data = json.loads(text)
        except ValueError:
            data = None
    if not isinstance(data, dict):
        return None, (f"the profile's {MODEL_KEY} {path} is not a JSON object of at most "
                      f"{CONFIG_BYTES} bytes: give the model's config.json")
    return data, ""


def weights_source(p: EngineProcess) -> str:
    """Where the weights' size came from, or why it was not read (a split GGUF's note)."""
    if p.weight_bytes is not None:
        plural = "s" if p.weight_files != 1 else ""
        return f"{p.weight_files} weight file{plural} in {p.model_dir}"
    split = [n for n in p.notes if n.startswith(SPLIT_GGUF_NOTE)]
    why = split[0] if split else "no *.safetensors, *.bin or *.gguf file found by the model's path"
    return f"{why}: the size is counted from config.json"


def decode_inputs(snap: NodeSnapshot, p: EngineProcess,
                  profile: NodeProfile | None = None) -> dict[str, Any]:
    """The decode model's inputs for engine process `p`: DecodeInputs' fields by name, with
    `config` (the model's config.json, for shape_from_config; the profile's decode_model_config
    where the engine's own is not read), `gpu_name`, `sources` and `missing`."""
    s = p.settings
    sources: dict[str, str] = {}
    missing: dict[str, str] = {}
    gpus = snap.nvidia.gpus if snap.nvidia is not None else []
    gpu_name = gpus[0].name if gpus else None
    if gpu_name:
        sources["gpu"] = "nvidia-smi"
        sources["gpu_count"] = "nvidia-smi"
    else:
        missing["gpu"] = ("nvidia-smi printed no GPU: install the driver, or give "
                          f"{BANDWIDTH_KEY} in the profile")
    sources["tp"] = s.source.get("tensor_parallel", "engine default")
    sources["pp"] = s.source.get("pipeline_parallel", "engine default")
    sources["eager"] = s.source.get("eager", "engine default")
    if s.max_model_len:
        context = s.max_model_len
        sources["context"] = s.source.get("max_model_len", "--max-model-len")
    else:
        context = ASSUMED_CONTEXT
        sources["context"] = (f"assumed: {ASSUMED_CONTEXT} tokens (no --max-model-len, "
                              "--context-length or -c on the command line)")
    config = p.hf_config
    if config is not None:
        sources["model_config"] = p.model_config_from or "the engine's model"
    else:
        config, why = profile_config(snap, profile)
        if config is not None:
            path = profile.decode_model_config if profile is not None else None
            sources["model_config"] = f"profile: {MODEL_KEY} {path} (read on the node)"
        else:
            missing["model_config"] = (
                f"config.json of {s.model or 'the model'} not read ("
                f"{'; '.join(n for n in p.notes if 'model' in n) or 'no model path'}): {why}")
    where = sources if p.weight_bytes is not None else missing
    where["weights_bytes"] = weights_source(p)
    world = s.tensor_parallel * s.pipeline_parallel
    link, p2p = engine_link(snap, min(world, len(gpus)) if gpus else 0)
    if world > 1:
        if link is not None:
            sources["link"] = "nvidia-smi topo -m"
        else:
            missing["link"] = "nvidia-smi topo -m not read (the audit reads it with the GPUs)"
        if p2p is not None:
            sources["p2p"] = "nvidia-smi topo -p2p r"
    return {"gpu_name": gpu_name, "gpu_count": len(gpus) or None, "tp": s.tensor_parallel,
            "pp": s.pipeline_parallel, "eager": s.eager, "context": context, "config": config,
            "weights_bytes": p.weight_bytes, "link": link, "p2p": p2p, "sources": sources,
            "missing": missing}


def measured_tokens_per_s(numbers: EngineNumbers | None) -> tuple[float | None, str | None]:
    """(tokens/s of one stream, the window) from the engine's mean time per output token."""
    if numbers is None or not numbers.time_per_output_token_s:
        return None, None
    return 1.0 / numbers.time_per_output_token_s, WINDOW


def _dtypes(p: EngineProcess, config: dict[str, Any] | None, sources: dict[str, str],
            missing: dict[str, str]) -> tuple[float, float | None]:
    """(KV bytes an element, bytes a weight is held in where the engine's --quantization /
    --dtype change it from the files; else None), their sources in `sources`."""
    s = p.settings
    kv_flag = s.source.get("kv_cache_dtype", "--kv-cache-dtype")
    kv, kv_source = kv_bytes(p.engine, s.kv_cache_dtype, s.dtype, kv_flag)
    sources["kv_dtype_bytes"] = kv_source
    if kv is None:
        missing["kv_dtype_bytes"] = f"{kv_source}: give a dtype of docs/decode.md's KV table"
    held, why = engine_weight_bytes(
        s.quantization, s.dtype, config, s.source.get("quantization", "--quantization"),
        s.source.get("dtype", "--dtype") if s.dtype else "engine default --dtype")
    if held is not None:
        sources["weight_bytes_per_param"] = why
    return kv or 2.0, held


def decode_part(snap: NodeSnapshot, p: EngineProcess, numbers: EngineNumbers | None = None,
                profile: NodeProfile | None = None) -> dict[str, Any]:
    """The report's "decode" object of engine `p` (gpunode.decode.step.decode_json) with
    `fixes`: what the audit's findings would give if fixed, largest gain first. The profile's
    decode_model_config and decode_gpu_bandwidth_gb_s fill or replace those inputs."""
    raw = decode_inputs(snap, p, profile)
    sources, missing = dict(raw["sources"]), dict(raw["missing"])
    shape = per_param = None
    weights_bytes = raw["weights_bytes"]
    if raw["config"] is not None:
        try:
            shape = shape_from_config(raw["config"])
        except DecodeInputError as exc:
            missing["model_config"] = f"config.json {exc.field}: {exc.fix}"
        per_param, where = dtype_bytes_from_config(raw["config"])
        if per_param is not None:
            sources["weight_bytes_per_param"] = where
    kv, held = _dtypes(p, raw["config"], sources, missing)
    if held is not None:  # the engine holds the weights in another width than the files
        per_param, weights_bytes = held, None
        sources["weights_bytes"] = "not used: the engine holds the weights in another width"
        missing.pop("weights_bytes", None)
    allreduce = measured_allreduce(snap, raw["tp"], shape.hidden) if shape else None
    if allreduce is not None:
        sources["allreduce_us"] = allreduce[1]
    gpu = lookup_gpu(raw["gpu_name"]) if raw["gpu_name"] else None
    bandwidth = profile.decode_gpu_bandwidth_gb_s if profile is not None else None
    if bandwidth is not None:
        sources["memory_bandwidth_gb_s"] = f"profile: {BANDWIDTH_KEY}"
        missing.pop("gpu", None)
    elif raw["gpu_name"] and gpu is None:
        sources.pop("gpu", None)
        missing["gpu"] = (f"{raw['gpu_name']!r} is not in gpunode/decode/gpus.yaml: give "
                          f"{BANDWIDTH_KEY} in the profile")
    try:
        inputs = DecodeInputs(
            shape=shape, weights_bytes=weights_bytes, weight_bytes_per_param=per_param,
            gpu=gpu, bandwidth_gb_s=bandwidth, gpu_count=raw["gpu_count"], tp=raw["tp"],
            pp=raw["pp"], context=raw["context"], kv_dtype_bytes=kv, eager=raw["eager"],
            link=raw["link"], p2p=raw["p2p"], allreduce_us=allreduce[0] if allreduce else None,
            sources=sources, missing=missing)
    except ValidationError as exc:  # e.g. -tp 0 on the command line: no figure, no crash
        error = exc.errors()[0]
        field = ".".join(str(x) for x in error["loc"])
        missing[field] = f"the engine's {field} {error.get('input')!r}: {error['msg']}"
        inputs = DecodeInputs(sources=sources, missing=missing)
    result = decode_step(inputs)
    measured, window = measured_tokens_per_s(numbers)
    out = decode_json(result, measured, window)
    out["fixes"] = ranked_fixes(inputs, result.ceiling_tokens_per_s)
    out["bar"] = step_bar(result)
    return out


def ranked_fixes(inputs: DecodeInputs, now: float | None) -> list[dict[str, Any]]:
    """What the audit's findings would give if fixed (the ceiling recomputed), largest gain
    first; a "fix" that would not raise the ceiling is none."""
    changes: list[tuple[str, dict[str, Any]]] = []
    if inputs.eager:
        changes.append(("CUDA graphs on (drop --enforce-eager / --disable-cuda-graph)",
                        {"eager": False}))
    if inputs.p2p is False:  # a time measured without P2P: the model's factor off it
        halved = ({} if inputs.allreduce_us is None else
                  {"allreduce_us": inputs.allreduce_us / NO_P2P_FACTOR})
        changes.append(("P2P on between the engine's GPUs (see the audit's P2P findings)",
                        {"p2p": True, **halved}))
    fixes: list[dict[str, Any]] = []
    for what, change in changes:
        fixed = what_if(inputs, **change).ceiling_tokens_per_s
        if fixed is not None and now and fixed > now:
            fixes.append({"fix": what, "ceiling_tokens_per_s": fixed, "gain": fixed / now - 1})
    return sorted(fixes, key=lambda f: -f["gain"])

"""Serving engines' arguments, parsed as the engines parse them (pure: argv, env, config in).

Which engine a command line is (`engine_of`), and its settings (`parse_settings`):
- vLLM: `vllm serve [MODEL] ...` (current CLI) and `python -m vllm.entrypoints.openai.api_server
  --model M ...` (older); argparse with vLLM's FlexibleArgumentParser: `--flag value`,
  `--flag=value`, `--flag_name` = `--flag-name`, `-tp`/`-pp`, booleans with their `--no-`
  form, and `--config FILE` (YAML of the same options; the command line wins over it);
- SGLang: `python -m sglang.launch_server --model-path M --tp-size/--tp N ...` (argparse);
- TGI: `text-generation-launcher` (clap: flags, or the variables it reads instead: NUM_SHARD,
  CUDA_GRAPHS, MODEL_ID, PORT, HOSTNAME; a flag wins over its variable);
- TensorRT-LLM: `trtllm-serve [serve] MODEL --tp_size N --pp_size N` (click);
- llama.cpp: `llama-server` (flags, or LLAMA_ARG_* variables).

The last occurrence of a flag wins (argparse). Unknown flags are skipped with their value.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

Engine = Literal["vllm", "sglang", "tgi", "trtllm", "llama.cpp"]
Kind = Literal["int", "float", "str", "bool", "negbool", "hint"]
"""`hint`: vLLM's human_readable_int (vllm/engine/arg_utils.py): `32k` = 32000, `32K` = 32768;
`auto` or `-1`: the model's own length (None)."""

VLLM_MODULE = "vllm.entrypoints.openai.api_server"
SGLANG_MODULE = "sglang.launch_server"


class EngineSettings(BaseModel):
    """What the checks need of an engine's arguments; `source` says where each came from
    (`--flag`, `config FILE`, `env NAME`; absent: the engine's default)."""

    model_config = ConfigDict(frozen=True)

    model: str | None = None
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    data_parallel: int = 1
    """Replicas (vLLM --data-parallel-size/-dp, SGLang --dp-size without dp-attention)."""
    dp_attention: bool = False
    nodes: int = 1
    """SGLang --nnodes: the ranks are spread over that many nodes."""
    eager: bool = False
    """CUDA graphs off: vLLM --enforce-eager, SGLang --disable-cuda-graph, TGI --cuda-graphs 0."""
    custom_all_reduce: bool = True
    gpu_memory_fraction: float | None = None
    """vLLM --gpu-memory-utilization (default 0.9), SGLang --mem-fraction-static."""
    host: str | None = None
    port: int | None = None
    metrics: bool = False
    """The engine serves Prometheus /metrics (vLLM always; SGLang with --enable-metrics)."""
    config_path: str | None = None
    quantization: str | None = None
    """vLLM --quantization/-q, SGLang --quantization (None: the model's own)."""
    dtype: str | None = None
    """vLLM/SGLang --dtype (None: auto, the config's torch_dtype)."""
    kv_cache_dtype: str | None = None
    """vLLM/SGLang --kv-cache-dtype, llama.cpp --cache-type-k (None: auto, the model dtype)."""
    hf_config_path: str | None = None
    """vLLM --hf-config-path: where its config.json is read instead of the model's."""
    max_model_len: int | None = None
    """vLLM --max-model-len, SGLang --context-length, llama.cpp -c/--ctx-size (None: the
    model's own; llama.cpp 0 means the same)."""
    expert_parallel: bool = False
    """vLLM --enable-expert-parallel: EP = TP x DP."""
    expert_parallel_size: int | None = None
    """SGLang --ep-size/--ep."""
    source: dict[str, str] = Field(default_factory=dict)
    problems: list[str] = Field(default_factory=list)
    """Values the engine would refuse (not a number...), each as a report line."""


# option spellings -> (setting, kind), per engine
_VLLM: dict[str, tuple[str, Kind]] = {
    "--model": ("model", "str"), "--tensor-parallel-size": ("tensor_parallel", "int"),
    "-tp": ("tensor_parallel", "int"), "--pipeline-parallel-size": ("pipeline_parallel", "int"),
    "-pp": ("pipeline_parallel", "int"), "--data-parallel-size": ("data_parallel", "int"),
    "-dp": ("data_parallel", "int"), "--enforce-eager": ("eager", "bool"),
    "--no-enforce-eager": ("eager", "negbool"),
    "--disable-custom-all-reduce": ("custom_all_reduce", "negbool"),
    "--gpu-memory-utilization": ("gpu_memory_fraction", "float"),
    "--host": ("host", "str"), "--port": ("port", "int"), "--config": ("config_path", "str"),
    "--quantization": ("quantization", "str"), "-q": ("quantization", "str"),
    "--dtype": ("dtype", "str"), "--kv-cache-dtype": ("kv_cache_dtype", "str"),
    "--hf-config-path": ("hf_config_path", "str"), "--max-model-len": ("max_model_len", "hint"),
    "--enable-expert-parallel": ("expert_parallel", "bool"),
    "--no-enable-expert-parallel": ("expert_parallel", "negbool"),
}
_SGLANG: dict[str, tuple[str, Kind]] = {
    "--model-path": ("model", "str"), "--model": ("model", "str"),
    "--tp-size": ("tensor_parallel", "int"), "--tp": ("tensor_parallel", "int"),
    "--pp-size": ("pipeline_parallel", "int"), "--pp": ("pipeline_parallel", "int"),
    "--dp-size": ("data_parallel", "int"), "--dp": ("data_parallel", "int"),
    "--enable-dp-attention": ("dp_attention", "bool"), "--nnodes": ("nodes", "int"),
    "--disable-cuda-graph": ("eager", "bool"),
    "--disable-custom-all-reduce": ("custom_all_reduce", "negbool"),
    "--mem-fraction-static": ("gpu_memory_fraction", "float"),
    "--host": ("host", "str"), "--port": ("port", "int"), "--enable-metrics": ("metrics", "bool"),
    "--quantization": ("quantization", "str"), "--dtype": ("dtype", "str"),
    "--kv-cache-dtype": ("kv_cache_dtype", "str"), "--context-length": ("max_model_len", "int"),
    "--ep-size": ("expert_parallel_size", "int"), "--ep": ("expert_parallel_size", "int"),
}
_TGI: dict[str, tuple[str, Kind]] = {
    "--model-id": ("model", "str"), "--num-shard": ("tensor_parallel", "int"),
    "--cuda-graphs": ("cuda_graphs", "str"), "--hostname": ("host", "str"),
    "--port": ("port", "int"), "-p": ("port", "int"),
}
_TGI_ENV = {"MODEL_ID": "--model-id", "NUM_SHARD": "--num-shard", "CUDA_GRAPHS": "--cuda-graphs",
            "HOSTNAME": "--hostname", "PORT": "--port"}
_TRTLLM: dict[str, tuple[str, Kind]] = {
    "--tp_size": ("tensor_parallel", "int"), "--pp_size": ("pipeline_parallel", "int"),
    "--host": ("host", "str"), "--port": ("port", "int"),
}
_LLAMA: dict[str, tuple[str, Kind]] = {
    "-m": ("model", "str"), "--model": ("model", "str"), "--host": ("host", "str"),
    "--port": ("port", "int"), "--metrics": ("metrics", "bool"),
    "-c": ("max_model_len", "int"), "--ctx-size": ("max_model_len", "int"),
    "-ctk": ("kv_cache_dtype", "str"), "--cache-type-k": ("kv_cache_dtype", "str"),
}
_LLAMA_ENV = {"LLAMA_ARG_MODEL": "--model", "LLAMA_ARG_HOST": "--host",
              "LLAMA_ARG_PORT": "--port", "LLAMA_ARG_ENDPOINT_METRICS": "--metrics",
              "LLAMA_ARG_CTX_SIZE": "--ctx-size", "LLAMA_ARG_CACHE_TYPE_K": "--cache-type-k"}
OPTIONS: dict[str, dict[str, tuple[str, Kind]]] = {
    "vllm": _VLLM, "sglang": _SGLANG, "tgi": _TGI, "trtllm": _TRTLLM, "llama.cpp": _LLAMA}
DEFAULTS: dict[str, dict[str, Any]] = {
    "vllm": {"port": 8000, "gpu_memory_fraction": 0.9, "metrics": True},
    "sglang": {"host": "127.0.0.1", "port": 30000},
    "tgi": {"port": 3000, "metrics": True},
    "trtllm": {"host": "localhost", "port": 8000},
    "llama.cpp": {"host": "127.0.0.1", "port": 8080},
}
_TRUE = {"1", "true", "yes", "on"}


def _base(arg: str) -> str:
    return arg.rsplit("/", 1)[-1]


def _module_after_m(argv: Sequence[str]) -> str | None:
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m":
            return argv[i + 1]
    return None


def engine_of(argv: Sequence[str]) -> tuple[Engine, int] | None:
    """(engine, index of its first argument) for a command line, None when it is none of
    them. `python -m MODULE`, a console script run directly or by its interpreter."""
    module = _module_after_m(argv[:3])
    if module == VLLM_MODULE:
        return "vllm", argv.index("-m") + 2
    if module == SGLANG_MODULE:
        return "sglang", argv.index("-m") + 2
    for i, arg in enumerate(argv[:2]):
        name = _base(arg)
        if name == "vllm" and i + 1 < len(argv) and argv[i + 1] == "serve":
            return "vllm", i + 2
        if name == "text-generation-launcher":
            return "tgi", i + 1
        if name == "trtllm-serve":
            return "trtllm", i + 2 if i + 1 < len(argv) and argv[i + 1] == "serve" else i + 1
        if name == "llama-server":
            return "llama.cpp", i + 1
    return None


def _spelling(engine: str, flag: str) -> str:
    """vLLM's FlexibleArgumentParser reads `--flag_name` as `--flag-name`."""
    if engine == "vllm" and flag.startswith("--"):
        return "--" + flag[2:].replace("_", "-")
    return flag


_HUMAN_INT_RE = re.compile(r"(\d+(?:\.\d+)?)([kmgtKMGT]?)")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_int(raw: str) -> int | None:
    """vLLM's human_readable_int: `25.6k` = 25600, `16K` = 16384 (no decimals with a binary
    suffix); `auto`/`-1` = None (the model's own length); ValueError otherwise."""
    value = raw.strip()
    if value in ("auto", "-1"):
        return None
    match = _HUMAN_INT_RE.fullmatch(value)
    if not match:
        raise ValueError(value)
    number, suffix = match.groups()
    if suffix in _DECIMAL:
        return int(float(number) * _DECIMAL[suffix])
    if "." in number:
        raise ValueError(value)
    return int(number) * _BINARY.get(suffix, 1)


def _convert(kind: Kind, raw: str) -> Any:
    if kind == "hint":
        return human_int(raw)
    if kind == "int":
        return int(raw)
    if kind == "float":
        return float(raw)
    return raw


def scan_flags(engine: str, args: Sequence[str]) -> tuple[dict[str, tuple[str, str | None]],
                                                          list[str]]:
    """Known options -> (the flag as written, its raw value or None for a boolean); the
    positional arguments. Unknown `--x value` pairs are skipped as argparse would."""
    options = OPTIONS[engine]
    found: dict[str, tuple[str, str | None]] = {}
    positional: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            i += 1
            continue
        flag, eq, inline = arg.partition("=")
        flag = _spelling(engine, flag)
        known = options.get(flag)
        takes_value = known is None or known[1] not in ("bool", "negbool")
        value: str | None = None
        if eq:
            value = inline
        elif takes_value and i + 1 < len(args) and not args[i + 1].startswith("--"):
            value = args[i + 1]
            i += 1
        if known is not None:
            found[flag] = (flag, value)
        i += 1
    return found, positional


def _apply(values: dict[str, Any], source: dict[str, str], problems: list[str],
           setting: str, kind: Kind, raw: str | None, origin: str) -> None:
    if kind == "bool":
        values[setting] = True if raw is None else str(raw).strip().lower() in _TRUE
    elif kind == "negbool":
        values[setting] = False if raw is None else str(raw).strip().lower() not in _TRUE
    elif raw is None:
        problems.append(f"{origin} has no value")
        return
    else:
        try:
            values[setting] = _convert(kind, str(raw))
        except ValueError:
            problems.append(f"{origin} {raw!r} is not a number")
            return
    source[setting] = origin


def parse_config_yaml(text: str) -> tuple[dict[str, Any], str | None]:
    """vLLM's --config file -> ({option name with dashes: value}, error line or None)."""
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "not YAML"
        return {}, f"not valid YAML ({first})"
    if data is None:
        return {}, None
    if not isinstance(data, dict):
        return {}, f"a YAML {type(data).__name__}, not a mapping of options"
    return {str(k).replace("_", "-"): v for k, v in data.items()}, None


def _config_values(engine: str, config: dict[str, Any], path: str, values: dict[str, Any],
                   source: dict[str, str], problems: list[str]) -> None:
    for name, raw in config.items():
        known = OPTIONS[engine].get(f"--{name}")
        if known is None or known[0] == "config_path":
            continue
        setting, kind = known
        text = None if raw is None else (str(raw).lower() if isinstance(raw, bool) else str(raw))
        if kind in ("bool", "negbool") and text is None:
            continue
        _apply(values, source, problems, setting, kind, text, f"{name} in config {path}")


def _env_flags(engine: str, env: dict[str, str]) -> dict[str, tuple[str, str | None]]:
    table = _TGI_ENV if engine == "tgi" else _LLAMA_ENV if engine == "llama.cpp" else {}
    return {flag: (f"env {name}", env[name]) for name, flag in table.items() if name in env}


def parse_settings(argv: Sequence[str], env: dict[str, str] | None = None,
                   config_text: str | None = None) -> EngineSettings | None:
    """The engine's settings from its command line, its environment (variables it reads in
    place of flags) and its --config file text; None when argv is no known engine."""
    found = engine_of(argv)
    if found is None:
        return None
    engine, start = found
    flags, positional = scan_flags(engine, argv[start:])
    values: dict[str, Any] = dict(DEFAULTS[engine])
    source: dict[str, str] = {}
    problems: list[str] = []
    if engine in ("vllm", "trtllm") and positional and start > 0 and (
            argv[start - 1] == "serve"):
        values["model"] = positional[0]
        source["model"] = "positional"
    config_path = flags.get("--config", (None, None))[1] if engine == "vllm" else None
    if config_path is not None:
        values["config_path"] = config_path
        if config_text is not None:
            config, error = parse_config_yaml(config_text)
            if error:
                problems.append(f"--config {config_path}: {error}")
            _config_values(engine, config, config_path, values, source, problems)
    ordered = {**_env_flags(engine, env or {}), **flags}  # a flag wins over its variable
    for flag, (origin, raw) in ordered.items():
        setting, kind = OPTIONS[engine][flag]
        if setting != "config_path":
            _apply(values, source, problems, setting, kind, raw, origin)
    cuda_graphs = values.pop("cuda_graphs", None)
    if cuda_graphs is not None:  # TGI: --cuda-graphs 0 turns them off
        values["eager"] = str(cuda_graphs).strip() in ("0", "")
        source["eager"] = source.pop("cuda_graphs", "--cuda-graphs")
    return EngineSettings(**values, source=source, problems=problems)


_ENGINE_PROGRAM_RE = re.compile(
    r"(^|/)(vllm|text-generation-launcher|trtllm-serve|llama-server)$|"
    r"^(vllm\.entrypoints\.openai\.api_server|sglang\.launch_server)$")
ENGINE_ARG_PATTERN = _ENGINE_PROGRAM_RE.pattern
"""One argument of an engine's command line (grep -E on each NUL-separated argument)."""


def gpus_per_node(settings: EngineSettings) -> int:
    """The GPUs one node's share of the engine needs: TP x PP (x DP) / nodes."""
    replicas = 1 if settings.dp_attention else settings.data_parallel
    world = settings.tensor_parallel * settings.pipeline_parallel * replicas
    return max(1, world // max(1, settings.nodes))


def expert_parallel_size(settings: EngineSettings) -> int:
    """EP: vLLM --enable-expert-parallel spreads the experts over TP x DP ranks (vLLM docs,
    Expert Parallel Deployment); SGLang --ep-size; else 1."""
    if settings.expert_parallel_size:
        return settings.expert_parallel_size
    if settings.expert_parallel:
        return settings.tensor_parallel * settings.data_parallel
    return 1


def flag_of(settings: EngineSettings, setting: str, default: str) -> str:
    """How the engine was told a setting ('--enforce-eager', 'env NUM_SHARD', ...)."""
    return settings.source.get(setting, default)

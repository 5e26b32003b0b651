"""The engine's model as its process sees it (issue 40's decode inputs; a part of the engine
read, gpunode.facts.engine_read, which runs `model_read_command()` for each process, $p its pid).

The model is its `--model`/`--model-path`/`--model-id`/`-m` argument or `vllm serve MODEL`, a
directory or file through /proc/PID/root (a relative one through /proc/PID/cwd), or a hub id
ORG/NAME in the process's Hugging Face cache (its HF_HUB_CACHE, else HF_HOME/hub, else
HOME/.cache/huggingface/hub; models--ORG--NAME/snapshots/<newest>/). It prints `model-dir PATH`
(inside the process's root), `modelconfig B64` (its config.json, at most CONFIG_BYTES),
`weights SIZE NAME` (the size of each *.safetensors/*.bin/*.gguf shard, by stat: contents are
not read; a model given as one shard of a split GGUF, NAME-00001-of-00003.gguf, counts its
sibling shards), `ggufhead B64` (a .gguf model's first GGUF_HEAD_BYTES: its header's keys; a
split GGUF's first shard's, which holds them), `hfconfig B64` (config.json of vLLM's
--hf-config-path, which wins); `model-refused` (a path with `..`), `model-missing ARG`
(nothing found for it). `parse_model()` turns those lines into EngineProcess's model fields.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import shlex
from typing import Any, Protocol

from gpunode.decode.gguf import HEAD_BYTES as GGUF_HEAD_BYTES
from gpunode.decode.gguf import config_from_gguf, parse_gguf_header
from gpunode.decode.shape import DecodeInputError

CONFIG_BYTES = 262144


class ModelLines(Protocol):
    """One process's lines as the engine read gathers them (its _Record)."""

    fields: dict[str, str]
    weights: list[str]
    notes: list[str]


def b64(text: str) -> bytes | None:
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None


_MODEL_ARG = (r"/^serve$/{n;/^-/!{p;q};}; "  # `vllm serve MODEL`; `serve --model M` falls on
              r"/^--(model|model-path|model-id)=/{s/^[^=]*=//p;q}; "
              r"/^(--model|--model-path|--model-id)$/{n;/^-/q;p;q}; "
              r"/^-m$/{n;/^-/q;/^(vllm|sglang)\./b;p;q}")
_HF_CONFIG_ARG = r"/^--hf-config-path=/{s/^[^=]*=//p;q}; /^--hf-config-path$/{n;p;q}"
_HUB_ID = "[A-Za-z0-9_.-]*/[A-Za-z0-9_.-]*"
_WEIGHTS = ("*.safetensors", "*.bin", "*.gguf")
_SHARD = "[0-9]" * 5  # llama.cpp's gguf-split names: NAME-00001-of-00003.gguf
SPLIT_GGUF_NOTE = "split GGUF"  # the note's first words (the audit's report looks for it)
_SPLIT_GGUF = re.compile(r".*-([0-9]{5})-of-([0-9]{5})\.gguf")


def model_read_command() -> str:
    """Shell: the model's directory, config.json and weight sizes (see the module docstring);
    $p is the pid."""
    q = shlex.quote
    globs = " ".join(f'"$d"/{g}' for g in _WEIGHTS)
    env = "tr '\\0' '\\n' </proc/$p/environ 2>/dev/null | sed -n"
    return (
        f"a=$(tr '\\0' '\\n' </proc/$p/cmdline | sed -nE {q(_MODEL_ARG)}); d=; "
        'r="/proc/$p/root"; '
        'case "$a" in "") ;; *..*) echo model-refused; a= ;; /*) d="$r$a" ;; '
        f'*) if [ -e "/proc/$p/cwd/$a" ]; then d="/proc/$p/cwd/$a"; '
        f'elif case "$a" in */*/*) false ;; {_HUB_ID}) true ;; *) false ;; esac; then '
        f"h=$({env} 's/^HF_HUB_CACHE=//p' | head -n 1); "
        f'if [ -z "$h" ]; then h=$({env} \'s/^HF_HOME=//p\' | head -n 1); '
        '[ -n "$h" ] && h="$h/hub"; fi; '
        f'if [ -z "$h" ]; then h=$({env} \'s/^HOME=//p\' | head -n 1); '
        '[ -n "$h" ] && h="$h/.cache/huggingface/hub"; fi; '
        'case "$h" in /*) s=$(ls -td "$r$h/models--${a%%/*}--${a#*/}/snapshots"/*/ '
        "2>/dev/null | head -n 1); "
        '[ -n "$s" ] && d="${s%/}" ;; esac; fi ;; esac; '
        'if [ -n "$a" ] && [ -z "$d" ]; then echo "model-missing $a"; '
        'elif [ -n "$d" ] && [ ! -e "$d" ]; then echo "model-missing $a"; '
        'elif [ -f "$d" ]; then echo "model-dir ${d#$r}"; '
        f'case "${{d##*/}}" in *-{_SHARD}-of-{_SHARD}.gguf) '  # a split GGUF: every shard
        f'for w in "${{d%-{_SHARD}-of-*}}"-{_SHARD}-of-"${{d##*-of-}}"; do '
        '[ -f "$w" ] && echo "weights $(stat -L -c %s "$w") ${w##*/}"; done | head -n 4096 ;; '
        '*) echo "weights $(stat -L -c %s "$d") ${d##*/}" ;; esac; '
        f'case "${{d##*/}}" in *-{_SHARD}-of-{_SHARD}.gguf) '  # the first shard holds the keys
        f'g="${{d%-{_SHARD}-of-*}}-00001-of-${{d##*-of-}}" ;; *.gguf) g="$d" ;; *) g= ;; esac; '
        f'[ -n "$g" ] && [ -r "$g" ] && echo "ggufhead $(head -c {GGUF_HEAD_BYTES} "$g" | '
        'base64 -w0)"; '
        'elif [ -d "$d" ]; then echo "model-dir ${d#$r}"; '
        '[ -r "$d/config.json" ] && '
        f'echo "modelconfig $(head -c {CONFIG_BYTES + 1} "$d/config.json" | base64 -w0)"; '
        f'for w in {globs}; do [ -f "$w" ] && echo "weights $(stat -L -c %s "$w") ${{w##*/}}"; '
        "done | head -n 4096; fi; "
        f"c=$(tr '\\0' '\\n' </proc/$p/cmdline | sed -n {q(_HF_CONFIG_ARG)}); "
        'case "$c" in "") ;; *..*) echo model-refused ;; *) '
        'case "$c" in /*) c="$r$c" ;; *) c="/proc/$p/cwd/$c" ;; esac; '
        '[ -d "$c" ] && c="$c/config.json"; '
        f'[ -r "$c" ] && echo "hfconfig $(head -c {CONFIG_BYTES + 1} "$c" | base64 -w0)" ;; esac'
    )


def _model_json(record: ModelLines, key: str, what: str) -> dict[str, Any] | None:
    if key not in record.fields:
        return None
    raw = b64(record.fields[key]) or b""
    if len(raw) > CONFIG_BYTES:
        record.notes.append(f"{what} longer than {CONFIG_BYTES} bytes: not read")
        return None
    try:
        data = json.loads(raw.decode("utf-8", "replace"))
    except ValueError:
        record.notes.append(f"{what} is not valid JSON: not read")
        return None
    if not isinstance(data, dict):
        record.notes.append(f"{what} is a JSON {type(data).__name__}, not an object")
        return None
    return data


def parse_model(record: ModelLines) -> dict[str, Any]:
    """model_dir, hf_config, weight_bytes, weight_files of a record (notes for the rest)."""
    if "model-refused" in record.fields:
        record.notes.append("the model path has '..': not read")
    if "model-missing" in record.fields:
        record.notes.append(f"model {record.fields['model-missing'].strip()!r}: no directory "
                            "or file through /proc/PID/root, nor in its Hugging Face cache")
    model_dir = record.fields.get("model-dir", "").strip() or None
    config = _model_json(record, "hfconfig", "--hf-config-path config.json")
    config_from = "config.json of --hf-config-path"
    if config is None:
        config = _model_json(record, "modelconfig", "the model's config.json")
        config_from = f"config.json in {model_dir}"
    if config is None and "ggufhead" in record.fields:
        config = _gguf_config(record, model_dir)
        config_from = f"GGUF header of {model_dir}"
    if config is None and model_dir and "hfconfig" not in record.fields:
        record.notes.append(f"no config.json readable in {model_dir}")
    sizes = [int(f[0]) for f in (w.split(" ", 1) for w in record.weights)
             if f and f[0].isdigit()]
    missing = _missing_shards(model_dir, [w.split(" ", 1)[-1] for w in record.weights])
    if missing:
        record.notes.append(missing)
        sizes = []
    return {"model_dir": model_dir, "hf_config": config,
            "model_config_from": config_from if config is not None else None,
            "weight_bytes": sum(sizes) if sizes else None, "weight_files": len(sizes)}


def _gguf_config(record: ModelLines, model: str | None) -> dict[str, Any] | None:
    """The model's config.json keys from its GGUF header's first bytes (a note on a bad one)."""
    try:
        config = config_from_gguf(parse_gguf_header(b64(record.fields["ggufhead"]) or b""))
    except DecodeInputError as exc:
        record.notes.append(f"the model's GGUF header ({model}): {exc.field}: {exc.problem}")
        return None
    return config


def _missing_shards(model: str | None, names: list[str]) -> str | None:
    """A split GGUF given by one shard's path whose other shards are not all there: the note
    (the weights' total is then not given: a part of the model is no figure for it)."""
    shard = _SPLIT_GGUF.fullmatch(model.rsplit("/", 1)[-1]) if model else None
    if shard is None:
        return None
    total = int(shard.group(2))
    found = {m.group(1) for m in map(_SPLIT_GGUF.fullmatch, names) if m}
    if len(found) == total:
        return None
    return (f"{SPLIT_GGUF_NOTE} {model}: {len(found)} of its {total} shards found beside it (put "
            "every shard in its folder)")




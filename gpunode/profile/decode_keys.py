"""The profile keys of the audit's decode model (docs/decode.md): their type and text."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

from gpunode.profile.allowed import JSON_FILE, check, shown


def _model_config_path(value: str) -> str:
    text = check(JSON_FILE, value, "an absolute path of a .json file such as "
                 "'/srv/models/Llama-3.1-8B/config.json'")
    if ".." in text.split("/"):
        raise ValueError(f"{shown(value)} has a '..' part: give the file's own path")
    return text


ModelConfigPath = Annotated[str, AfterValidator(_model_config_path)]
"""An absolute path of a .json file on the node, without '..' parts."""

MODEL_CONFIG_DOC = (
    "The audit's decode model (docs/decode.md): the path on the node of the config.json of "
    "the model its engines serve, read in the audit's one read, for an engine whose own "
    "config.json could not be found (a model the audit cannot see through /proc/PID/root). An "
    "absolute path ending in .json, no '..'; None: only the engines' own files.")
BANDWIDTH_DOC = (
    "The audit's decode model: the memory bandwidth of one of the node's GPUs in GB/s (10^9 "
    "bytes/s), used instead of the GPU table's datasheet figure (gpunode/decode/gpus.yaml), "
    "e.g. a GPU not in the table or a bandwidth you measured. None: the table's figure for the "
    "name nvidia-smi prints.")

"""The GPU table (gpus.yaml, one source per row), matched by the name nvidia-smi prints."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

TABLE = Path(__file__).with_name("gpus.yaml")


class GpuSpec(BaseModel):
    """One GPU model: its memory bandwidth and size, its links, and where they were read."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=80)
    match: list[str] = Field(min_length=1)
    memory_bandwidth_gb_s: float = Field(gt=0, le=20000)
    memory_gib: float = Field(gt=0, le=1024)
    pcie_gen: int | None = Field(default=None, ge=1, le=6)
    pcie_width: int | None = Field(default=None, ge=1, le=32)
    nvlink_gb_s: float | None = Field(default=None, gt=0, le=4000)
    source: str = Field(pattern=r"^https://\S+$")


@lru_cache(maxsize=1)
def _table() -> tuple[GpuSpec, ...]:
    rows = yaml.safe_load(TABLE.read_text(encoding="utf-8"))
    return tuple(GpuSpec.model_validate(row) for row in rows)


def gpu_table() -> list[GpuSpec]:
    """Every row of gpus.yaml."""
    return list(_table())


def _norm(name: str) -> str:
    return " ".join(name.split()).lower()


def lookup_gpu(smi_name: str) -> GpuSpec | None:
    """The row whose `match` (a regex, searched case-insensitively in the name with runs of
    blanks made one) fits the name nvidia-smi prints; the longest matching pattern wins, so
    "H100 NVL" is not taken for "H100"."""
    name = _norm(smi_name)
    best: tuple[int, GpuSpec] | None = None
    for spec in _table():
        for pattern in spec.match:
            if re.search(pattern, name, re.IGNORECASE) and (best is None or len(pattern) > best[0]):
                best = (len(pattern), spec)
    return best[1] if best else None

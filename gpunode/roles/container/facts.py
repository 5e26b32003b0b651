"""Facts read inside a GPU container (over ``@pct`` or SSH); each one command, parsed by a
pure function here so the parsing is tested on text.

- ``AptVersions``: the versions apt offers for the NVIDIA userspace packages
  (``apt-cache madison``), to match the host's driver exactly or say what is on offer.
- ``ContainerGpuState``: what the container sees in one round trip: ``nvidia-smi -L``, its
  exit status, ``ulimit -l``, the init's locked-memory limit, the /dev/nvidia* nodes
  passed in, and the host's module version (/proc/driver/nvidia is the host's: procfs
  is not namespaced for drivers).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import asdict

from pyinfra.api import FactBase

from gpunode.facts.nvidia import parse_nvidia_proc_version
from gpunode.facts.nvidia_devices import parse_nvidia_dev_listing

__all__ = [
    "CONTAINER_GPU_STATE_COMMAND",
    "AptVersions",
    "ContainerGpuState",
    "parse_apt_madison",
    "parse_container_gpu_state",
]


def parse_apt_madison(text: str) -> dict[str, list[str]]:
    """``apt-cache madison`` -> {package: [versions, newest first as apt lists them]}.

    Lines look like `` nvidia-smi | 535.216.01-1~deb12u1 | http://... bookworm/non-free
    amd64 Packages``; source-package lines (``... Sources``) are skipped.
    """
    versions: dict[str, list[str]] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 3 or not parts[0] or not parts[1]:
            continue
        if parts[2].endswith("Sources"):
            continue
        found = versions.setdefault(parts[0], [])
        if parts[1] not in found:
            found.append(parts[1])
    return versions


class AptVersions(FactBase):
    """{package: [versions apt offers]} for the given package names ({} when none)."""

    def requires_command(self, *args: object, **kwargs: object) -> str:
        return "apt-cache"

    @staticmethod
    def default() -> dict:
        return {}

    def command(self, packages: list[str]) -> str:
        names = " ".join(shlex.quote(p) for p in packages)
        return f"apt-cache madison {names} 2>/dev/null; true"

    def process(self, output: list[str]) -> dict[str, list[str]]:
        return parse_apt_madison("\n".join(output))


_SECTIONS = ("smi", "memlock", "init", "nodes", "module")
CONTAINER_GPU_STATE_COMMAND = (
    "echo '== smi'; nvidia-smi -L 2>&1; echo \"rc=$?\"; "
    "echo '== memlock'; ulimit -l; "
    "echo '== init'; grep -i 'locked memory' /proc/1/limits 2>/dev/null; "
    "echo '== nodes'; stat -c '%F|%t|%T|%n' /dev/nvidia* /dev/nvidia-caps/* 2>/dev/null; "
    "echo '== module'; cat /proc/driver/nvidia/version 2>/dev/null; true"
)
_GPU_LINE_RE = re.compile(r"^GPU \d+: ")
_LIMIT_RE = re.compile(r"^Max locked memory\s+(\S+)\s+(\S+)", re.IGNORECASE)


def parse_container_gpu_state(text: str) -> dict:
    """Split :data:`CONTAINER_GPU_STATE_COMMAND` output.

    Returns ``smi_rc`` (nvidia-smi's exit status; 127: not installed), ``gpus`` (its
    ``GPU N: ...`` lines), ``smi_error`` (its first other line), ``memlock`` (``ulimit -l``:
    ``unlimited`` or KiB), ``init_memlock`` (soft limit of PID 1 in bytes or
    ``unlimited``), ``nodes`` (the /dev/nvidia* nodes) and ``module_version``.
    """
    sections: dict[str, list[str]] = {name: [] for name in _SECTIONS}
    current = None
    for line in text.splitlines():
        if line.startswith("== ") and line[3:].strip() in sections:
            current = line[3:].strip()
            continue
        if current is not None:
            sections[current].append(line)

    smi_rc = None
    smi_lines = []
    for line in sections["smi"]:
        if line.startswith("rc=") and line[3:].strip().isdigit():
            smi_rc = int(line[3:].strip())
        elif line.strip():
            smi_lines.append(line.strip())
    gpus = [line for line in smi_lines if _GPU_LINE_RE.match(line)]
    others = [line for line in smi_lines if not _GPU_LINE_RE.match(line)]
    memlock = next((line.strip() for line in sections["memlock"] if line.strip()), None)
    init_memlock = None
    for line in sections["init"]:
        match = _LIMIT_RE.match(line.strip())
        if match:
            init_memlock = match.group(1)
    nodes = parse_nvidia_dev_listing("\n".join(sections["nodes"]))
    return {
        "smi_rc": smi_rc,
        "gpus": gpus,
        "smi_error": others[0] if others else None,
        "memlock": memlock,
        "init_memlock": init_memlock,
        "nodes": [asdict(node) for node in nodes],
        "module_version": parse_nvidia_proc_version("\n".join(sections["module"])),
    }


class ContainerGpuState(FactBase):
    """See :func:`parse_container_gpu_state`."""

    def command(self) -> str:
        return CONTAINER_GPU_STATE_COMMAND

    def process(self, output: list[str]) -> dict:
        return parse_container_gpu_state("\n".join(output))

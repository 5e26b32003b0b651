"""The serving engines running on the node, read from the host's /proc (one read-only pass).

`EngineProcesses` is one part of the snapshot's read (gpunode.facts.snapshot, with the
audit's needs). One `grep -lza` over every /proc/PID/cmdline finds the processes with an
engine's program or module among their arguments (gpunode.facts.engines.ENGINE_ARG_PATTERN);
for each (at most MAX_PROCESSES) it prints, line by line:

- `cmdline B64`, `environ B64` (base64 of the NUL-separated files, at most ARG_BYTES each;
  `environ-unreadable` where /proc hides it: another user, hidepid);
- `status ...`: PPid, Uid, Cpus_allowed_list, Mems_allowed_list; `limits ...`: the
  "Max locked memory" line; `cgroup ...`: /proc/PID/cgroup (Proxmox `lxc/VMID`, LXC
  `lxc.payload.NAME`, Docker `docker-ID.scope` or `docker/ID`);
- `shm BLOCKS BSIZE`: statfs of /proc/PID/root/dev/shm (the process's own /dev/shm, its
  container's; `df` would report the host's mount at that path instead);
- `config B64`: the vLLM `--config FILE` text through /proc/PID/root (or /proc/PID/cwd for a
  relative path), at most CONFIG_BYTES; `config-unreadable`, `config-refused` (a path with
  `..`);
- `torch B64`: the `__version__` and `cuda` lines of torch/version.py under the process's
  prefixes (its program's `.../bin/..`, /usr/local, /usr) through /proc/PID/root;
- `compat PATH`: CUDA forward-compatibility libraries (/usr/local/cuda*/compat/libcuda.so.V)
  in its filesystem;
- the model (for the decode model, issue 40): gpunode.facts.engine_model's lines.

Nothing runs inside a container (no pct exec, no docker exec, no nsenter); nothing is
written. A process that exits while it is read leaves a partial record: the parser keeps
what it has and says what is missing.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pyinfra.api import FactBase

from gpunode.facts.engine_model import (
    CONFIG_BYTES,
    b64,
    model_read_command,
    parse_model,
)
from gpunode.facts.engines import ENGINE_ARG_PATTERN, EngineSettings, engine_of, parse_settings

MAX_PROCESSES = 64
ARG_BYTES = 65536
RECORD = "@@engine:pid "


class EngineProcess(BaseModel):
    """One engine process as the host sees it."""

    model_config = ConfigDict(frozen=True)

    pid: int
    ppid: int | None = None
    engine: str
    argv: list[str] = Field(default_factory=list)
    env: dict[str, str] | None = None
    """None: the environment could not be read."""
    uid: int | None = None
    cpus_allowed: str | None = None
    mems_allowed: str | None = None
    memlock_soft: str | None = None
    """'unlimited' or bytes (Max locked memory of /proc/PID/limits)."""
    cgroup: str = ""
    vmid: int | None = None
    """Proxmox container (cgroup lxc/VMID)."""
    lxc_name: str | None = None
    """Plain LXC container (cgroup lxc.payload.NAME)."""
    docker: str | None = None
    """Docker container id (12 hex digits)."""
    shm_kib: int | None = None
    torch_version: str | None = None
    torch_cuda: str | None = None
    cuda_compat: list[str] = Field(default_factory=list)
    """CUDA forward-compatibility libraries in its filesystem (/usr/local/cuda*/compat/
    libcuda.so.VERSION), as paths inside it."""
    settings: EngineSettings = Field(default_factory=EngineSettings)
    model_dir: str | None = None
    """Where the model's files were found, as a path inside the process's root."""
    hf_config: dict[str, Any] | None = None
    """Its config.json (vLLM --hf-config-path's when given; for a .gguf model file, its header's
    keys as config.json's: gpunode.decode.gguf.config_from_gguf); None: not read (see notes)."""
    model_config_from: str | None = None
    """Where hf_config was read: 'config.json in DIR', 'GGUF header of FILE'."""
    weight_bytes: int | None = None
    """Total bytes of its weight files (*.safetensors, *.bin, *.gguf); None: none found."""
    weight_files: int = 0
    workers: int = 0
    """Forked children with the same command line (vLLM's workers), folded in."""
    notes: list[str] = Field(default_factory=list)
    """What could not be read, each as a report line."""

    @property
    def where(self) -> str:
        """'CT 110', 'LXC name', 'docker abc' (inside CT 110), or 'host'."""
        parts = []
        if self.vmid is not None:
            parts.append(f"CT {self.vmid}")
        elif self.lxc_name:
            parts.append(f"LXC {self.lxc_name}")
        if self.docker:
            parts.append(f"docker {self.docker}")
        return ", ".join(parts) or "host"

    @property
    def label(self) -> str:
        return f"{self.engine} pid {self.pid} ({self.where})"


class EngineReadState(BaseModel):
    model_config = ConfigDict(frozen=True)

    processes: list[EngineProcess] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def split_nul(data: bytes) -> list[str]:
    """NUL-separated /proc text -> its items (the trailing NUL dropped)."""
    items = data.split(b"\0")
    if items and items[-1] == b"":
        items = items[:-1]
    return [item.decode("utf-8", "replace") for item in items]


def parse_environ(data: bytes) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in split_nul(data):
        name, eq, value = item.partition("=")
        if eq and name:
            env[name] = value
    return env


_LXC_RE = re.compile(r"/lxc/(\d+)(?:/|$)")
_PAYLOAD_RE = re.compile(r"/lxc\.payload\.([^/]+)")
_DOCKER_RE = re.compile(r"docker[-/]([0-9a-f]{12,64})")


def container_of(cgroup: str) -> tuple[int | None, str | None, str | None]:
    """/proc/PID/cgroup text -> (Proxmox vmid, LXC name, Docker id)."""
    vmid = name = docker = None
    for line in cgroup.splitlines():
        path = line.split(":", 2)[-1]
        if vmid is None and (m := _LXC_RE.search(path)):
            vmid = int(m.group(1))
        if name is None and (m := _PAYLOAD_RE.search(path)):
            name = m.group(1)
        if docker is None and (m := _DOCKER_RE.search(path)):
            docker = m.group(1)[:12]
    return vmid, name, docker


def _torch(text: str) -> tuple[str | None, str | None]:
    version = cuda = None
    for line in text.splitlines():
        m = re.match(r"^(__version__|cuda)\s*(?::[^=]*)?=\s*['\"]([^'\"]*)['\"]", line)
        if m and m.group(1) == "__version__":
            version = m.group(2)
        elif m:
            cuda = m.group(2)
    return version, cuda


class _Record:
    """The lines of one process, gathered before they make an EngineProcess."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fields: dict[str, str] = {}
        self.status: dict[str, str] = {}
        self.cgroup: list[str] = []
        self.compat: list[str] = []
        self.weights: list[str] = []
        self.notes: list[str] = []

    def add(self, line: str) -> None:
        key, _, rest = line.partition(" ")
        if key == "status":
            name, _, value = rest.partition(":")
            self.status[name.strip()] = value.strip()
        elif key == "cgroup":
            self.cgroup.append(rest)
        elif key == "compat":
            self.compat.append(rest.strip())
        elif key == "weights":
            self.weights.append(rest)
        else:
            self.fields[key] = rest


def _argv(record: _Record) -> list[str] | None:
    raw = b64(record.fields.get("cmdline", ""))
    if raw is None or not raw:
        return None
    if len(raw) > ARG_BYTES:
        record.notes.append(f"command line longer than {ARG_BYTES} bytes: read its first "
                            f"{ARG_BYTES}")
        raw = raw[:ARG_BYTES]
    return split_nul(raw)


def _env(record: _Record) -> dict[str, str] | None:
    if "environ-unreadable" in record.fields or "environ" not in record.fields:
        record.notes.append("environment not readable (another user, or /proc mounted with "
                            "hidepid): its variables are not checked")
        return None
    raw = b64(record.fields["environ"]) or b""
    if len(raw) > ARG_BYTES:
        record.notes.append(f"environment longer than {ARG_BYTES} bytes: read its first part")
        raw = raw[:ARG_BYTES]
    return parse_environ(raw)


def _config_text(record: _Record) -> str | None:
    if "config-refused" in record.fields:
        record.notes.append("--config path has '..': not read")
    elif "config-unreadable" in record.fields:
        record.notes.append("--config file not readable through /proc/PID/root")
    elif "config" in record.fields:
        raw = b64(record.fields["config"]) or b""
        if len(raw) > CONFIG_BYTES:
            record.notes.append(f"--config file longer than {CONFIG_BYTES} bytes: not read")
            return None
        return raw.decode("utf-8", "replace")
    return None


def _int(text: str | None) -> int | None:
    return int(text) if text and text.strip().lstrip("-").isdigit() else None


def _shm_kib(line: str | None) -> int | None:
    """`stat -f -c '%b %S'` (blocks, block size) -> KiB; None when it printed nothing."""
    fields = (line or "").split()
    if len(fields) != 2 or not all(re.fullmatch(r"[0-9]+", f) for f in fields):
        return None
    return int(fields[0]) * int(fields[1]) // 1024


def engine_process(record: _Record) -> EngineProcess | None:
    """A process record -> EngineProcess; None when its command line is gone or is no
    engine's (the grep matched an argument only)."""
    argv = _argv(record)
    if argv is None:
        return None
    found = engine_of(argv)
    if found is None:
        return None
    env = _env(record)
    settings = parse_settings(argv, env, _config_text(record)) or EngineSettings()
    limits = record.fields.get("limits", "").replace("Max locked memory", "").split()
    vmid, lxc_name, docker = container_of("\n".join(record.cgroup))
    version, cuda = _torch((b64(record.fields.get("torch", "")) or b"").decode(
        "utf-8", "replace"))
    if not record.status:
        record.notes.append("the process exited while it was read: partial record")
    return EngineProcess(
        pid=record.pid, ppid=_int(record.status.get("PPid")), engine=found[0], argv=argv,
        env=env, uid=_int((record.status.get("Uid") or "").split("\t")[0].split(" ")[0]),
        cpus_allowed=record.status.get("Cpus_allowed_list"),
        mems_allowed=record.status.get("Mems_allowed_list"),
        memlock_soft=limits[0] if limits else None, cgroup="\n".join(record.cgroup),
        vmid=vmid, lxc_name=lxc_name, docker=docker,
        shm_kib=_shm_kib(record.fields.get("shm")), torch_version=version, torch_cuda=cuda,
        cuda_compat=record.compat[:8],
        settings=settings, **parse_model(record), notes=[*record.notes, *settings.problems],
    )


def fold_workers(processes: list[EngineProcess]) -> list[EngineProcess]:
    """Children forked by an engine (same command line, parent listed) folded into it."""
    by_pid = {p.pid: p for p in processes}
    children: dict[int, int] = {}
    for p in processes:
        parent = by_pid.get(p.ppid or -1)
        if parent is not None and parent.argv == p.argv:
            children[parent.pid] = children.get(parent.pid, 0) + 1
    return [p.model_copy(update={"workers": children.get(p.pid, 0)}) for p in processes
            if not (by_pid.get(p.ppid or -1) and by_pid[p.ppid or -1].argv == p.argv)]


def parse_engine_read(lines: list[str]) -> EngineReadState:
    records: list[_Record] = []
    notes: list[str] = []
    for line in lines:
        if line.startswith(RECORD):
            pid = _int(line[len(RECORD):])
            if pid is not None:
                records.append(_Record(pid))
        elif line.startswith("@@engine:more"):
            notes.append(f"more than {MAX_PROCESSES} engine processes: the first "
                         f"{MAX_PROCESSES} read")
        elif records:
            records[-1].add(line)
    processes = []
    for record in records:
        if not (b64(record.fields.get("cmdline", "")) or b""):
            notes.append(f"pid {record.pid} exited while it was read")
            continue
        process = engine_process(record)
        if process is not None:
            processes.append(process)
    return EngineReadState(processes=fold_workers(processes), notes=notes)


_STATUS_KEYS = "^(PPid|Uid|Cpus_allowed_list|Mems_allowed_list):"
_CONFIG_ARG = "/^--config=/{s/^--config=//p;q}; /^--config$/{n;p;q}"
_PREFIXES = r"s#^\(/.*\)/bin/[^/]*$#\1#p"
def engine_read_command() -> str:
    """The shell of the read (see the module docstring)."""
    q = shlex.quote
    per_process = (
        f'echo "{RECORD}$p"; '
        f'echo "cmdline $(head -c {ARG_BYTES + 1} /proc/$p/cmdline | base64 -w0)"; '
        "if head -c 1 /proc/$p/environ >/dev/null 2>&1; then "
        f'echo "environ $(head -c {ARG_BYTES + 1} /proc/$p/environ | base64 -w0)"; '
        "else echo environ-unreadable; fi; "
        f"grep -E {q(_STATUS_KEYS)} /proc/$p/status | sed 's/^/status /'; "
        "grep '^Max locked memory' /proc/$p/limits | sed 's/^/limits /'; "
        "sed 's/^/cgroup /' /proc/$p/cgroup; "
        'echo "shm $(stat -f -c \'%b %S\' /proc/$p/root/dev/shm 2>/dev/null)"; '
        f"c=$(tr '\\0' '\\n' </proc/$p/cmdline | sed -n {q(_CONFIG_ARG)}); f=; "
        'case "$c" in "") ;; *..*) echo config-refused ;; '
        '/*) f="/proc/$p/root$c" ;; *) f="/proc/$p/cwd/$c" ;; esac; '
        'if [ -n "$f" ]; then if [ -r "$f" ]; then '
        f'echo "config $(head -c {CONFIG_BYTES + 1} "$f" | base64 -w0)"; '
        "else echo config-unreadable; fi; fi; "
        f"for d in $(tr '\\0' '\\n' </proc/$p/cmdline | head -n 2 | sed -n {q(_PREFIXES)}) "
        "/usr/local /usr; do for v in /proc/$p/root$d/lib/python3*/*-packages/torch/version.py; "
        'do if [ -f "$v" ]; then '
        "echo \"torch $(grep -E '^(__version__|cuda)' \"$v\" | head -c 512 | base64 -w0)\"; "
        "break 2; fi; done; done; "
        "for c in /proc/$p/root/usr/local/cuda*/compat/libcuda.so.*.*; do "
        '[ -e "$c" ] && echo "compat ${c#/proc/$p/root}"; done; '
        f"{model_read_command()}"
    )
    return (
        f"n=0; for m in $(grep -lzaE {q(ENGINE_ARG_PATTERN)} /proc/[0-9]*/cmdline); do "
        "p=${m#/proc/}; p=${p%/cmdline}; "
        '[ "$p" = "$$" ] && continue; '
        f"n=$((n+1)); if [ $n -gt {MAX_PROCESSES} ]; then echo @@engine:more; break; fi; "
        f"{per_process}; done; true"
    )


class EngineProcesses(FactBase):
    """The serving engines of the node (see the module docstring); an EngineReadState."""

    @staticmethod
    def default() -> EngineReadState:
        return EngineReadState()

    def command(self) -> str:
        return engine_read_command()

    def process(self, output: list[str]) -> EngineReadState:
        return parse_engine_read(output)

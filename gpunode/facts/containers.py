"""What the audit reads of the Proxmox node's containers: ContainerState from each
/etc/pve/lxc/VMID.conf, its `pct list` row and the in-container probe (driver version, memlock);
pure parsers (gathered by AuditFacts)."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from gpunode.facts.gpu_numa import GpuNuma, local_cpuset
from gpunode.facts.pve_config import (
    cgroup_v1_entries,
    dev_path,
    get,
    get_all,
    main_options,
    mount_target,
    parse_pve_lxc_config,
)


class ContainerState(BaseModel):
    """One container of this Proxmox node, as far as the audit needs it."""

    model_config = ConfigDict(frozen=True)

    vmid: int
    name: str = ""
    status: str = ""
    """From `pct list`: running, stopped, ... ("" when not listed)."""
    config_read: bool = False
    """/etc/pve/lxc/VMID.conf was read (it needs root)."""
    gpu: bool = False
    """The config hands NVIDIA devices to the container."""
    memlock_config: str | None = None
    """lxc.prlimit.memlock in the main section (None = not set)."""
    exec_ran: bool = False
    """`pct exec` ran (only for running GPU containers)."""
    driver_version: str | None = None
    """`nvidia-smi --query-gpu=driver_version` inside the container."""
    driver_error: str | None = None
    """nvidia-smi's first line inside the container when it printed no version."""
    memlock_live: str | None = None
    """Soft 'Max locked memory' of the container's init (/proc/1/limits)."""
    gpus: list[int] = Field(default_factory=list)
    """GPU indices (N of /dev/nvidiaN) the config passes, by mount or devN key."""
    device_paths: list[str] = Field(default_factory=list)
    """Host NVIDIA device nodes its config hands over (devN keys, lxc.mount.entry sources)."""
    cpuset_cpus: str | None = None
    """lxc.cgroup2.cpuset.cpus in the main section (None = not set: pvestatd moves it)."""
    cpuset_mems: str | None = None
    local_cpus: str | None = None
    """The CPUs of its GPUs' NUMA node(s); None: nothing to pin (one node, or unknown)."""
    local_mems: str | None = None
    cgroup_v1: list[tuple[str, str]] = Field(default_factory=list)
    """The main section's lxc.cgroup.* (cgroup v1) entries: ignored on cgroup v2 hosts."""


_VERSION_RE = re.compile(r"^\d+(?:\.\d+)+$")


def parse_container_exec(text: str) -> tuple[str | None, str | None, str | None]:
    """Output of the in-container probe -> (driver version, nvidia-smi error line, memlock).

    The probe prints nvidia-smi's first line (a version such as "550.54.15", or an error such
    as "Failed to initialize NVML: Driver/library version mismatch"), then the
    "Max locked memory" line of /proc/1/limits.
    """
    version = error = memlock = None
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("Max locked memory"):
            fields = line[len("Max locked memory"):].split()
            memlock = fields[0] if fields else None
        elif version is None and error is None:
            if _VERSION_RE.match(line.split(",")[0].strip()):
                version = line.split(",")[0].strip()
            else:
                error = line
    return version, error, memlock


def is_gpu_container(config_text: str) -> bool:
    """The main section hands NVIDIA devices over: devN: /dev/nvidia..., an lxc.mount.entry of
    /dev/nvidia..., or an lxc.cgroup2.devices.allow for major 195."""
    config = parse_pve_lxc_config(config_text)
    for key, value in main_options(config).items():
        if re.match(r"^dev\d+$", key) and value.startswith("/dev/nvidia"):
            return True
    for value in get_all(config, "lxc.mount.entry"):
        if value.split(" ", 1)[0].startswith("/dev/nvidia"):
            return True
    return any(re.match(r"^c 195:", value.strip())
               for value in get_all(config, "lxc.cgroup2.devices.allow"))


_GPU_NODE_RE = re.compile(r"^dev/nvidia(\d+)$")


def passed_gpus(config_text: str) -> list[int]:
    """GPU indices a config hands to its container: mounts at dev/nvidiaN (any spelling of
    the target) and devN keys for /dev/nvidiaN."""
    config = parse_pve_lxc_config(config_text)
    gpus = set()
    for line in config.main.lines:
        if line.kind != "key" or line.key is None:
            continue
        if line.key == "lxc.mount.entry":
            target = mount_target(line.value or "") or ""
        elif re.match(r"^dev\d+$", line.key):
            target = dev_path(line.value or "").lstrip("/")
        else:
            continue
        match = _GPU_NODE_RE.match(target)
        if match:
            gpus.add(int(match.group(1)))
    return sorted(gpus)


def gpu_device_paths(config_text: str) -> list[str]:
    """The host paths under /dev/nvidia* a config passes: devN keys and mount sources."""
    config = parse_pve_lxc_config(config_text)
    paths = set()
    for line in config.main.lines:
        if line.kind != "key" or line.key is None:
            continue
        if line.key == "lxc.mount.entry":
            source = (line.value or "").split(" ", 1)[0]
        elif re.match(r"^dev\d+$", line.key):
            source = dev_path(line.value or "")
        else:
            continue
        if source.startswith("/dev/nvidia"):
            paths.add(source)
    return sorted(paths)


def container_state(vmid: int, config_text: str | None, listed: dict[str, str] | None,
                    exec_text: str | None, numa: GpuNuma | None = None) -> ContainerState:
    """One container from its config text, its `pct list` row and the in-container probe;
    ``numa`` (the host's GPU placement) gives the cpuset local to its GPUs."""
    listed = listed or {}
    gpu = bool(config_text) and is_gpu_container(config_text or "")
    config = parse_pve_lxc_config(config_text) if config_text else None
    memlock = get(config, "lxc.prlimit.memlock") if config else None
    version = error = memlock_live = None
    if exec_text is not None:
        version, error, memlock_live = parse_container_exec(exec_text)
    gpus = passed_gpus(config_text) if config_text else []
    local = local_cpuset(numa, gpus)
    return ContainerState(
        vmid=vmid, name=listed.get("name", ""), status=listed.get("status", ""),
        config_read=config_text is not None, gpu=gpu,
        memlock_config=memlock, exec_ran=exec_text is not None, driver_version=version,
        driver_error=error, memlock_live=memlock_live,
        cgroup_v1=cgroup_v1_entries(config) if config else [],
        gpus=gpus,
        device_paths=gpu_device_paths(config_text) if config_text else [],
        cpuset_cpus=get(config, "lxc.cgroup2.cpuset.cpus") if config else None,
        cpuset_mems=get(config, "lxc.cgroup2.cpuset.mems") if config else None,
        local_cpus=local[0] if local else None,
        local_mems=local[1] if local else None,
    )

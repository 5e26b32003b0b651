"""validate_containers: the declared list of one Proxmox host checked as a whole and against
the host's facts (vmids taken, GPUs it lacks, duplicates), every problem reported at once as
ContainerSpecError, before any change."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from gpunode.profile.allowed import did_you_mean, shown
from gpunode.profile.container.spec import ContainerSpec


class SpecProblem(BaseModel):
    """One problem: where, what was given, and what would be right."""

    field: str
    value: Any
    problem: str
    fix: str


class ContainerSpecError(ValueError):
    """Raised before any change when the declared containers can't be applied.

    ``str(err)`` names the host, the field path, the bad value and the fix, one
    problem per line; ``err.problems`` has them as data.
    """

    def __init__(self, host: str, problems: list[SpecProblem]):
        self.host = host
        self.problems = problems
        lines = [
            f"{host}: {p.field} = {shown(p.value)}: {p.problem}. Fix: {p.fix}" for p in problems
        ]
        super().__init__("\n".join(lines))

    @property
    def field(self) -> str:
        return self.problems[0].field


_FIX_HINTS: dict[str, str] = {
    "vmid": "use an integer from 100 to 999999999 that no other guest in the cluster uses",
    "hostname": "use one DNS label such as 'llm-a'",
    "ostemplate": "use a template volume like 'local:vztmpl/debian-12-standard_12.7-1_amd64"
    ".tar.zst' (`pveam list local` shows the downloaded ones)",
    "cores": "use an integer from 1 to 8192",
    "memory": "use an integer number of MiB, at least 16",
    "swap": "use an integer number of MiB, 0 or more",
    "rootfs_storage": "use a storage id from `pvesm status` that holds container disks",
    "rootfs_size_gb": "use an integer number of GiB, at least 1",
    "net0": "write it as Proxmox does, e.g. 'name=eth0,bridge=vmbr0,ip=dhcp'",
    "features": "write it as Proxmox does, e.g. 'nesting=1,keyctl=1'",
    "unprivileged": "use true or false",
    "onboot": "use true or false",
    "restart_allowed": "use true or false",
    "gpus": "use 'all' or a list of indices of /dev/nvidiaN on the host, e.g. [0, 1]",
    "memlock": "use 'unlimited' or a positive integer number of bytes",
    "extra_lxc": "write each line as 'lxc.key: value' with a key Proxmox accepts",
    "nvidia_driver": "use the host driver's version, e.g. '550.127.05', or leave it unset",
    "gpu_passthrough": "use 'auto', 'dev' or 'mount'",
    "cpuset_cpus": "use 'auto', a CPU list from the host such as '0-15,32-47', or null",
    "cpuset_mems": "use 'auto', a NUMA node list from the host such as '1', or null",
}


_ITEM_RE = re.compile(r"^item (\d+): (.*)$", re.DOTALL)


def _path(prefix: str, loc: tuple[Any, ...]) -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in ContainerSpec.model_fields:
            path += f".{part}"
        # Other parts are pydantic's union-member tags ("literal['all']"): skip them.
    return path


def _problems_from_validation(
    prefix: str, raw: dict[str, Any], exc: ValidationError
) -> list[SpecProblem]:
    problems: dict[str, SpecProblem] = {}
    allowed_keys = ", ".join(ContainerSpec.model_fields)
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        field = next((p for p in loc if isinstance(p, str)), "")
        path = _path(prefix, loc)
        if err["type"] == "extra_forbidden":
            path = f"{prefix}.{field}"
            problem = "unknown key"
            fix = (f"remove it or use one of: {allowed_keys}"
                   f"{did_you_mean(field, ContainerSpec.model_fields)}")
        elif err["type"] == "missing":
            path = f"{prefix}.{field}"
            problem = "is required"
            fix = _FIX_HINTS.get(field, "set it")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            problem = msg[0].lower() + msg[1:] if msg else "is invalid"
            fix = _FIX_HINTS.get(field, "see the field's description in ContainerSpec")
        value = raw.get(field) if isinstance(raw, dict) else raw
        item = _ITEM_RE.match(problem)
        if item and isinstance(value, list):
            index = int(item.group(1))
            path, problem = f"{path}[{index}]", item.group(2)
            value = value[index] if index < len(value) else None
        if path not in problems:
            problems[path] = SpecProblem(field=path, value=value, problem=problem, fix=fix)
    return list(problems.values())


def validate_containers(
    host_name: str,
    raw: Any,
    existing: dict[int, str],
    gpus_on_host: int | Sequence[int],
) -> list[ContainerSpec]:
    """Validate the declared containers of one Proxmox host against its facts.

    ``existing`` maps the vmids already used (cluster-wide, VMs too) to the guest's
    name; a vmid that exists under another name is an error, under the same name
    it is this container. ``gpus_on_host``: the N of each /dev/nvidiaN on the host (a
    count n means 0..n-1; a GPU that fell off the bus leaves a gap). Every problem is
    reported at once.
    """
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise ContainerSpecError(
            host_name,
            [
                SpecProblem(
                    field="containers",
                    value=raw,
                    problem="is not a list",
                    fix="declare containers as a list of mappings, one per container",
                )
            ],
        )
    specs: list[ContainerSpec] = []
    problems: list[SpecProblem] = []
    on_host = (list(range(gpus_on_host)) if isinstance(gpus_on_host, int)
               else sorted(gpus_on_host))
    for i, item in enumerate(raw):
        prefix = f"containers[{i}]"
        if not isinstance(item, dict):
            problems.append(
                SpecProblem(
                    field=prefix,
                    value=item,
                    problem="is not a mapping",
                    fix="write each container as a mapping with vmid, hostname, ostemplate...",
                )
            )
            continue
        try:
            specs.append(ContainerSpec.model_validate(item))
        except ValidationError as exc:
            problems.extend(_problems_from_validation(prefix, item, exc))
        problems.extend(_check_against_host(prefix, item, existing, on_host))

    problems.extend(_check_unique(raw))
    if problems:
        raise ContainerSpecError(host_name, problems)
    return specs


def _check_against_host(
    prefix: str, item: dict[str, Any], existing: dict[int, str], on_host: list[int]
) -> list[SpecProblem]:
    """vmid taken by another guest, GPU indices the host lacks. Reads the raw item so
    these are reported even when other fields of the container are wrong too."""
    problems = []
    vmid, hostname, gpus = item.get("vmid"), item.get("hostname"), item.get("gpus", "all")
    other = existing.get(vmid) if isinstance(vmid, int) and not isinstance(vmid, bool) else None
    if other is not None and other != hostname:
        free = _free_vmid(existing)
        problems.append(
            SpecProblem(
                field=f"{prefix}.vmid",
                value=vmid,
                problem=f"is already used by another guest named {other!r}",
                fix=f"pick a free vmid (e.g. {free}), or set hostname to {other!r} if that "
                "guest is this container",
            )
        )
    if not on_host:
        problems.append(
            SpecProblem(
                field=f"{prefix}.gpus",
                value=gpus,
                problem="the host has no NVIDIA GPU device (/dev/nvidiaN)",
                fix="install and load the NVIDIA driver on the host (nvidia-smi must list "
                "the GPUs), or remove this container from the host's data",
            )
        )
    elif isinstance(gpus, list):
        for j, index in enumerate(gpus):
            if isinstance(index, int) and not isinstance(index, bool) and index not in on_host:
                indices = format_indices(on_host)
                problems.append(
                    SpecProblem(
                        field=f"{prefix}.gpus[{j}]",
                        value=index,
                        problem=f"no such GPU: the host has {len(on_host)} "
                        f"(indices {indices}: /dev/nvidiaN)",
                        fix=f"use indices {indices}, or 'all'",
                    )
                )
    return problems


def format_indices(indices: Sequence[int]) -> str:
    """[0, 1, 2, 5, 6] -> '0..2, 5..6' (runs of consecutive indices)."""
    runs: list[list[int]] = []
    for index in sorted(set(indices)):
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return ", ".join(f"{r[0]}..{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)


def _check_unique(raw: list[Any]) -> list[SpecProblem]:
    """Two declared containers with the same vmid, or the same hostname."""
    problems = []
    seen: dict[str, dict[Any, int]] = {"vmid": {}, "hostname": {}}
    fixes = {
        "vmid": "give every container its own vmid",
        "hostname": "give every container on a host its own hostname",
    }
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            continue
        for key in ("vmid", "hostname"):
            value = item.get(key)
            if value is None or isinstance(value, (bool, list, dict)):
                continue
            if value in seen[key]:
                problems.append(
                    SpecProblem(
                        field=f"containers[{i}].{key}",
                        value=value,
                        problem=f"is also declared by containers[{seen[key][value]}]",
                        fix=fixes[key],
                    )
                )
            else:
                seen[key][value] = i
    return problems


def _free_vmid(existing: dict[int, str]) -> int:
    vmid = 100
    while vmid in existing:
        vmid += 1
    return vmid

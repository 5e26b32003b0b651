"""Check every Proxmox host's declared containers against its facts, before any change.

``validate_container_hosts(hosts)`` reads, on each host that declares containers
(host data ``gpunode_containers``): the guests of the cluster (``PveGuests``, None where
there is no ``pct``), the NVIDIA device nodes and majors, the loaded driver version and the
configs of declared containers that exist. ``check_host_containers`` (pure) then reports
every problem of every host at once: a vmid used by another guest, a GPU index the host
lacks, an unknown key, passthrough the host can't do (nvidia-uvm not loaded), a declared
driver the host doesn't run, a change Proxmox can't make (unprivileged, a smaller disk).
A host without Proxmox that declares containers is an error naming it; a host that
declares none is not read at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyinfra.context import ctx_host

from gpunode.facts import pve_config
from gpunode.facts.gpu_numa import GpuNuma, format_cpulist, parse_cpulist
from gpunode.facts.lxc import (
    PveGuest,
    PveGuests,
    existing_guest_names,
)
from gpunode.facts.nvidia_devices import DeviceNode, PassthroughError, gpu_indices_on_host
from gpunode.facts.proxmox import PveVersion
from gpunode.facts.sections import as_model, fact_data
from gpunode.facts.snapshot import Needs, Part, read_node
from gpunode.profile.container import (
    ContainerSpec,
    ContainerSpecError,
    SpecProblem,
    immutable_mismatches,
    validate_containers,
)
from gpunode.profile.container.declared import (
    CONTAINERS_DATA_KEY,
    ContainerDeployError,
    declared_containers,
)
from gpunode.roles.lxc_gpu.ops import containers_needs
from gpunode.roles.lxc_gpu.plan import gpu_lines
from gpunode.roles.lxc_gpu.takeover import passthrough_style

__all__ = [
    "CONTAINERS_DATA_KEY",
    "ContainerDeployError",
    "HostFacts",
    "check_host_containers",
    "declared_containers",
    "read_host_facts",
    "validate_container_hosts",
]


@dataclass
class HostFacts:
    """What validation needs from one Proxmox host."""

    node: str | None
    """This node's name; None: not a Proxmox VE host (no ``pct``)."""
    guests: dict[int, PveGuest] = field(default_factory=dict)
    majors: dict[str, int] = field(default_factory=dict)
    devices: list[DeviceNode] = field(default_factory=list)
    driver: str | None = None
    configs: dict[int, str | None] = field(default_factory=dict)
    """/etc/pve/lxc/VMID.conf of the declared containers that exist on this node."""
    pve_version: str | None = None
    """pve-manager version ("8.2.4"); None when unknown."""
    numa: GpuNuma = field(default_factory=GpuNuma)
    """The NUMA nodes' CPUs and the GPUs' nodes (cpuset checks)."""



def declared_vmids(raw: Any) -> list[int]:
    """The integer vmids of a host's container declarations (the rest is refused later)."""
    items = raw if isinstance(raw, list) else []
    return [item["vmid"] for item in items
            if isinstance(item, Mapping) and isinstance(item.get("vmid"), int)]


def validation_needs(raw: Any) -> Needs:
    """What validating one host reads: what its container operations read (so the run reads
    the host once), its guests, the loaded driver, and the node lock (the run's first step)."""
    return containers_needs(declared_vmids(raw)) | Needs(
        lock=True, nvidia=True, parts=(Part(name="pve_guests", fact=PveGuests),))


def read_host_facts(host: Any, raw: Any) -> HostFacts:
    """Read one host that declares containers: its snapshot (one command; the container
    operations plan from the same one)."""
    with ctx_host.use(host):
        snapshot = read_node(validation_needs(raw))
    parts = snapshot.parts
    guests_fact = fact_data(parts.get("pve_guests"))
    if guests_fact is None:
        return HostFacts(node=None)
    guests = {
        int(vmid): PveGuest(**dict(g)) for vmid, g in dict(guests_fact["guests"]).items()
    }
    devices_fact = fact_data(parts["nvidia_devices"])
    facts = HostFacts(
        node=str(guests_fact["node"]),
        guests=guests,
        majors={str(k): int(v) for k, v in dict(devices_fact["majors"]).items()},
        devices=[DeviceNode(**dict(d)) for d in devices_fact["devices"]],
        driver=snapshot.driver_loaded,
    )
    pve = as_model(PveVersion, parts["pve"])
    facts.pve_version = pve.manager_version if pve.present else None
    facts.numa = as_model(GpuNuma, parts["gpu_numa"])
    for vmid in declared_vmids(raw):
        guest = guests.get(vmid)
        if guest is not None and guest.kind == "ct" and guest.node == facts.node:
            facts.configs[vmid] = parts.get(f"config:{vmid}")
    return facts


def check_host_containers(host_name: str, raw: Any, facts: HostFacts) -> list[ContainerSpec]:
    """Validate one host's declared containers against its facts (pure).

    Raises ``ContainerSpecError`` listing every problem; returns the specs otherwise
    ([] when none are declared, whatever the host is).
    """
    if raw is None or raw == []:
        return []
    if facts.node is None:
        vmids = [i.get("vmid") for i in raw if isinstance(i, Mapping)] if isinstance(
            raw, list
        ) else raw
        raise ContainerSpecError(
            host_name,
            [
                SpecProblem(
                    field=f"{CONTAINERS_DATA_KEY} (vmids)",
                    value=vmids,
                    problem=f"{host_name} is not a Proxmox VE host (no `pct` command)",
                    fix=f"declare containers on the Proxmox host that runs them, or remove "
                    f"{CONTAINERS_DATA_KEY} from {host_name}'s data",
                )
            ],
        )
    existing = existing_guest_names(facts.node, facts.guests)
    specs = validate_containers(host_name, raw, existing, gpu_indices_on_host(facts.devices))
    problems: list[SpecProblem] = []
    for i, spec in enumerate(specs):
        prefix = f"containers[{i}]"
        try:
            gpu_lines(spec, facts.majors, facts.devices, pve_version=facts.pve_version,
                      numa=facts.numa)
        except PassthroughError as exc:
            problems.append(
                SpecProblem(
                    field=f"{prefix}.gpus",
                    value=spec.gpus,
                    problem="GPU passthrough is not possible on this host now",
                    fix=str(exc),
                )
            )
        problems += _passthrough_problems(prefix, spec, facts)
        if spec.nvidia_driver and spec.nvidia_driver != facts.driver:
            problems.append(
                SpecProblem(
                    field=f"{prefix}.nvidia_driver",
                    value=spec.nvidia_driver,
                    problem=f"the host runs {facts.driver or 'no NVIDIA driver'}; the "
                    "container's libraries must equal the host's module exactly",
                    fix=f"set it to {facts.driver!r} or leave it unset"
                    if facts.driver
                    else "load the host's NVIDIA driver first",
                )
            )
        text = facts.configs.get(spec.vmid)
        if text is not None:
            current = pve_config.main_options(pve_config.parse_pve_lxc_config(text))
            if current.get("lock"):
                problems.append(
                    SpecProblem(
                        field=f"{prefix}.vmid",
                        value=spec.vmid,
                        problem=f"the container is locked ({current['lock']}): Proxmox is "
                        "working on it",
                        fix="run again when that has finished",
                    )
                )
            for message in immutable_mismatches(spec, current):
                problems.append(
                    SpecProblem(
                        field=prefix,
                        value=spec.vmid,
                        problem=message,
                        fix="change the spec to what the container has",
                    )
                )
    if problems:
        raise ContainerSpecError(host_name, problems)
    return specs


def _passthrough_problems(prefix: str, spec: ContainerSpec, facts: HostFacts
                          ) -> list[SpecProblem]:
    """devN keys on a Proxmox without them; a cpuset naming CPUs or nodes the host lacks."""
    problems = []
    style, explicit = passthrough_style(spec.gpu_passthrough, facts.pve_version)
    if explicit and style == "dev" and passthrough_style("auto", facts.pve_version)[0] != "dev":
        problems.append(SpecProblem(
            field=f"{prefix}.gpu_passthrough", value=spec.gpu_passthrough,
            problem=f"pve-manager {facts.pve_version or '(unknown)'} has no devN keys "
            "(Proxmox VE 8.2 and later)",
            fix="use 'auto' or 'mount', or upgrade Proxmox VE",
        ))
    numa = facts.numa
    checks = (
        ("cpuset_cpus", spec.cpuset_cpus, numa.cpus, "CPUs"),
        ("cpuset_mems", spec.cpuset_mems, set(numa.node_cpus), "NUMA nodes"),
    )
    for name, declared, known, what in checks:
        if declared in (None, "auto") or not known:
            continue
        missing = sorted(set(parse_cpulist(declared)) - known)
        if missing:
            problems.append(SpecProblem(
                field=f"{prefix}.{name}", value=declared,
                problem=f"the host has no {what} {format_cpulist(missing)} "
                f"(it has {format_cpulist(known)})",
                fix=f"use {what} of {format_cpulist(known)}, or 'auto'",
            ))
    return problems


def validate_container_hosts(hosts: Iterable[Any]) -> dict[str, list[ContainerSpec]]:
    """Specs of every host that declares containers; one ContainerDeployError lists all
    problems of all hosts. Hosts without ``gpunode_containers`` are not read."""
    specs: dict[str, list[ContainerSpec]] = {}
    errors: list[str] = []
    for host in hosts:
        raw = declared_containers(host.data)
        if raw is None or raw == []:
            continue
        try:
            specs[host.name] = check_host_containers(host.name, raw, read_host_facts(host, raw))
        except ContainerSpecError as exc:
            errors.append(str(exc))
    if errors:
        raise ContainerDeployError(
            "gpunode: declared containers can't be applied (nothing was changed):\n"
            + "\n".join(errors)
        )
    return specs

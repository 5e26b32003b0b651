"""Which inventory hosts are GPU containers, and what each one needs to know.

A host is a container when it is reached with ``@pct`` (its data has ``pct_vmid``) or its
data has ``gpunode_container`` (a mapping of ``ContainerSettings``; use it for containers
reached over SSH). For an ``@pct/PVE:VMID`` host the Proxmox host is found in the same
inventory (by name or ssh_hostname), and its spec with that vmid supplies the GPU count
(when it lists indices) and the declared driver version.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gpunode.profile.container import ContainerSpec
from gpunode.profile.container.declared import ContainerDeployError
from gpunode.profile.loader import format_validation_error
from gpunode.roles.container.defaults import CONTAINER_DATA_KEY, ContainerSettings

__all__ = [
    "ContainerTarget",
    "container_target",
    "declared_specs",
    "is_container_host",
    "validate_container_targets",
]


@dataclass(frozen=True)
class ContainerTarget:
    settings: ContainerSettings
    expected_gpus: int | None
    """From settings.gpus, else len(spec.gpus) of the host's spec, else None."""
    declared_driver: str | None
    """From settings.nvidia_driver, else the host's spec; None: read the host's module."""
    label: str
    """'CT 110 (llm-a) on pve1' for @pct hosts, else the host name."""


def _get(data: Any, key: str) -> Any:
    getter = getattr(data, "get", None)
    return getter(key) if getter else None


def is_container_host(data: Any) -> bool:
    return _get(data, "pct_vmid") is not None or _get(data, CONTAINER_DATA_KEY) is not None


def _proxmox_spec(
    data: Any, specs: Mapping[str, list[ContainerSpec]], hosts: Mapping[str, Any]
) -> tuple[str, ContainerSpec] | None:
    vmid, proxmox = _get(data, "pct_vmid"), _get(data, "ssh_hostname")
    if vmid is None:
        return None
    for name, host_specs in specs.items():
        if proxmox not in (name, _get(hosts[name].data, "ssh_hostname")):
            continue
        for spec in host_specs:
            if spec.vmid == int(vmid):
                return name, spec
    return None


def container_target(
    name: str,
    data: Any,
    specs: Mapping[str, list[ContainerSpec]],
    hosts: Mapping[str, Any],
) -> ContainerTarget:
    """Resolve one container host; ContainerDeployError names it when its data is wrong."""
    raw = _get(data, CONTAINER_DATA_KEY) or {}
    if not isinstance(raw, Mapping):
        raise ContainerDeployError(
            f"{name}: {CONTAINER_DATA_KEY} must be a mapping of settings "
            f"(nvidia_driver, nvidia_packages, gpus), got {raw!r}"
        )
    try:
        settings = ContainerSettings.model_validate(dict(raw))
    except ValidationError as exc:
        raise ContainerDeployError(
            format_validation_error(name, exc, CONTAINER_DATA_KEY)
        ) from None
    found = _proxmox_spec(data, specs, hosts)
    expected = settings.gpus
    driver = settings.nvidia_driver
    label = name
    if found is not None:
        proxmox, spec = found
        label = f"CT {spec.vmid} ({spec.hostname}) on {proxmox}"
        if expected is None and spec.gpu_indices is not None:
            expected = len(spec.gpu_indices)
        driver = driver or spec.nvidia_driver
    return ContainerTarget(settings, expected, driver, label)


def validate_container_targets(
    hosts: Iterable[Any], specs: Mapping[str, list[ContainerSpec]]
) -> dict[str, ContainerTarget]:
    """Every container host's target; one ContainerDeployError lists all bad hosts."""
    hosts = list(hosts)
    by_name = {h.name: h for h in hosts}
    targets: dict[str, ContainerTarget] = {}
    errors: list[str] = []
    for host in hosts:
        if not is_container_host(host.data):
            continue
        try:
            targets[host.name] = container_target(host.name, host.data, specs, by_name)
        except ContainerDeployError as exc:
            errors.append(str(exc))
    if errors:
        raise ContainerDeployError("\n".join(errors))
    return targets


def declared_specs(hosts: Iterable[Any]) -> dict[str, list[ContainerSpec]]:
    """Each host's well-formed container specs from its data alone (no facts), to look up
    an ``@pct`` container's spec when its Proxmox host is not part of this run (--limit).
    Malformed items are skipped here: validating that host reports them."""
    from gpunode.profile.container.declared import declared_containers

    specs: dict[str, list[ContainerSpec]] = {}
    for host in hosts:
        raw = declared_containers(host.data)
        if not isinstance(raw, list):
            continue
        found = []
        for item in raw:
            try:
                found.append(ContainerSpec.model_validate(item))
            except ValidationError:
                continue
        if found:
            specs[host.name] = found
    return specs

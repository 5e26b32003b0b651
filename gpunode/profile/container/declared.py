"""Where a Proxmox host declares its containers (host data ``gpunode_containers``) and the
error for declarations that can't be applied: shared by the lxc_gpu role (which applies them)
and the container role (which finds an ``@pct`` container's spec)."""

from __future__ import annotations

from typing import Any

from pyinfra.api.exceptions import PyinfraError

CONTAINERS_DATA_KEY = "gpunode_containers"


class ContainerDeployError(PyinfraError, ValueError):
    """Declared containers that can't be applied; one line per problem, naming the host."""


def declared_containers(data: Any) -> Any:
    """The raw ``gpunode_containers`` value of a host's data (None when absent)."""
    getter = getattr(data, "get", None)
    return getter(CONTAINERS_DATA_KEY) if getter else None

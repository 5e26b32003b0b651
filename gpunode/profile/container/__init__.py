"""ContainerSpec: one Proxmox LXC container with NVIDIA GPUs, as declared in inventory data.

Inventory example (host data of a Proxmox host)::

    containers = [
        {
            "vmid": 110,
            "hostname": "llm-a",
            "ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
            "cores": 16,
            "memory": 65536,
            "gpus": [0, 1],
        },
    ]

``validate_containers`` checks the whole list against the host's facts before
any change is made and raises ``ContainerSpecError`` naming the host, the field
(``containers[1].gpus[0]``), the bad value and how to fix it. The ``pct_*_args``
functions turn a spec into the exact ``pct`` command lines (argv lists).

One module a concern:

- spec: the ContainerSpec schema, each field documented once, each value checked alone;
- values: property strings (net0, features) and their values, driver versions, package names;
- lxc_lines: the extra_lxc lines (keys Proxmox accepts, cgroup v1 keys and their fix);
- validate: the declared list against the host's facts (validate_containers);
- pct: the ``pct create`` / ``set`` / ``resize`` command lines and what can't converge.
"""

from __future__ import annotations

from gpunode.profile.container.lxc_lines import (
    cgroup_v1_fix,
    cgroup_v1_warning,
    is_cgroup_v1_key,
    parse_extra_lxc_line,
)
from gpunode.profile.container.pct import (
    immutable_mismatches,
    pct_create_args,
    pct_resize_args,
    pct_set_args,
    rootfs_size_gb,
)
from gpunode.profile.container.spec import ContainerSpec
from gpunode.profile.container.validate import (
    ContainerSpecError,
    SpecProblem,
    validate_containers,
)
from gpunode.profile.container.values import (
    checked_driver_version,
    checked_package_names,
    parse_property_string,
)

__all__ = [
    "ContainerSpec",
    "ContainerSpecError",
    "SpecProblem",
    "cgroup_v1_fix",
    "cgroup_v1_warning",
    "checked_driver_version",
    "checked_package_names",
    "immutable_mismatches",
    "is_cgroup_v1_key",
    "parse_extra_lxc_line",
    "parse_property_string",
    "pct_create_args",
    "pct_resize_args",
    "pct_set_args",
    "rootfs_size_gb",
    "validate_containers",
]

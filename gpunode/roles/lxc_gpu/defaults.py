"""lxc_gpu defaults: the fields of one declared container (ContainerSpec), from the Proxmox
host's data key ``gpunode_containers`` (a list of mappings, one per container).

| field           | default                         | why                                        |
|-----------------|---------------------------------|--------------------------------------------|
| vmid            | required                        | Proxmox guest id, unique in the cluster    |
| hostname        | required                        | also how an existing vmid is recognised    |
| ostemplate      | required                        | used by pct create only                    |
| cores           | 8                               | tokenisation + HTTP front end per GPU set  |
| memory          | 32768 MiB                       | model weights are staged in host RAM       |
| swap            | 0                               | swapping pinned buffers hides pressure     |
| rootfs_storage  | local-lvm                       | Proxmox's default container storage        |
| rootfs_size_gb  | 64                              | grows with pct resize, never shrinks       |
| net0            | name=eth0,bridge=vmbr0,ip=dhcp  | Proxmox's default bridge; hwaddr is kept   |
| unprivileged    | true                            | root inside is not root on the host        |
| features        | nesting=1                       | systemd in Debian 12+ containers wants it  |
| onboot          | true                            | an inference server comes back after boot  |
| gpus            | all                             | or indices N of /dev/nvidiaN on the host   |
| memlock         | unlimited                       | CUDA pins host memory; only the host can   |
|                 |                                 | raise it (lxc.prlimit.memlock)             |
| gpu_passthrough | auto                            | devN keys on Proxmox 8.2+, else mounts     |
| cpuset_cpus     | auto                            | the CPUs of the GPUs' NUMA node(s)         |
| cpuset_mems     | auto                            | the GPUs' NUMA node(s)                     |
| extra_lxc       | []                              | more raw lxc.* lines, added if missing     |
| restart_allowed | false                           | a restart stops the model server: opt in;  |
|                 |                                 | else the run reports "pending restart"     |
| nvidia_driver   | None (the host's)               | must equal the host's module exactly       |

The model (gpunode/roles/profile/container.py) documents each field; GPU lines are computed from the
host's /proc/devices and /dev/nvidia* (gpunode/roles/lxc_gpu/passthrough.py), never hard-coded.
"""

from gpunode.roles.lxc_gpu.validate import CONTAINERS_DATA_KEY
from gpunode.roles.profile.container import ContainerSpec

DEFAULTS = {
    name: field.default
    for name, field in ContainerSpec.model_fields.items()
    if not field.is_required() and field.default_factory is None
} | {"extra_lxc": []}

__all__ = ["CONTAINERS_DATA_KEY", "DEFAULTS", "ContainerSpec"]

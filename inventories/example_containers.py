"""A documented example: one Proxmox VE host with 8 GPUs and two LLM containers on it, and the
containers themselves as pyinfra hosts reached through the host with the @pct connector.

    # 1. The Proxmox host: create / converge the containers and their GPU lines.
    pyinfra inventories/example_containers.py deploy/containers.py --limit pve_hosts --dry
    pyinfra inventories/example_containers.py deploy/containers.py --limit pve_hosts
    # 2. Inside the containers: NVIDIA userspace at the host's driver version, then checks.
    pyinfra inventories/example_containers.py deploy/containers.py --limit gpu_containers

Run step 1 first: @pct connects with `pct exec`, so a container must exist and run before
step 2 can reach it. Each key of a container mapping is a ContainerSpec field
(gpunode/profile/container/spec.py; defaults and why in
gpunode/roles/lxc_gpu/defaults.py). The GPU lines are computed from the host's /proc/devices
and /dev/nvidia*: nothing to write by hand.
"""

PVE_HOST = "pve-gpu-01.example.internal"

_TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"

_CONTAINERS = [
    {
        # GPUs 0-3 (N of /dev/nvidiaN on the host), e.g. a 70B model with tensor parallel 4.
        "vmid": 110,
        "hostname": "llm-a",
        "ostemplate": _TEMPLATE,
        "cores": 32,
        "memory": 262144,
        "rootfs_storage": "local-zfs",
        "rootfs_size_gb": 200,
        "net0": "name=eth0,bridge=vmbr0,ip=dhcp",
        "gpus": [0, 1, 2, 3],
        # Apply raw lxc.* changes to the running container at once (restart).
        "restart_allowed": True,
    },
    {
        # GPUs 4-7; changes to the running container are only reported ("pending restart").
        "vmid": 111,
        "hostname": "llm-b",
        "ostemplate": _TEMPLATE,
        "cores": 32,
        "memory": 262144,
        "rootfs_storage": "local-zfs",
        "rootfs_size_gb": 200,
        "gpus": [4, 5, 6, 7],
        # Optional: fail before any change unless the host runs exactly this driver.
        "nvidia_driver": "550.127.05",
        # More raw lines, added when missing (here: the host's /dev/dri render nodes).
        "extra_lxc": [
            "lxc.cgroup2.devices.allow: c 226:* rwm",
            "lxc.mount.entry: /dev/dri dev/dri none bind,optional,create=dir",
        ],
    },
]

# SSH settings are the Proxmox host's, for the host itself and for @pct (which runs
# `pct exec` there). pct needs root: log in as root, or set "pct_sudo": True.
_SSH = {"ssh_user": "root"}

pve_hosts = [
    (PVE_HOST, {**_SSH, "gpunode_containers": _CONTAINERS}),
]

gpu_containers = [
    # @pct/PROXMOX_HOST:VMID. The spec with that vmid on PVE_HOST gives the GPU count that
    # nvidia-smi must list and the driver version; without them, the container reads the
    # host's module version from /proc/driver/nvidia/version and counts its /dev/nvidiaN.
    (f"@pct/{PVE_HOST}:110", {**_SSH}),
    (
        f"@pct/{PVE_HOST}:111",
        {
            **_SSH,
            "gpunode_container": {
                "nvidia_packages": [
                    "nvidia-smi",
                    "libnvidia-ml1",
                    "libcuda1",
                    "libnvidia-ptxjitcompiler1",
                    "libnvidia-nvvm4",  # for CUDA apps that JIT-link (LTO) through the driver
                ]
            },
        },
    ),
    # A container reached over SSH instead (its own sshd): mark it with gpunode_container.
    # ("llm-c.example.internal", {"ssh_user": "root", "gpunode_container": {"gpus": 1}}),
]

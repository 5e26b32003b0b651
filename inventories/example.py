"""A documented example inventory: two Proxmox VE hosts with 8 PCIe GPUs each (no NVLink).

    pyinfra inventories/example.py deploy/site.py --dry    # show the plan
    pyinfra inventories/example.py deploy/site.py          # apply and verify

Every key under "gpunode" is a NodeProfile field (gpunode/profile/node.py, docs/settings.md);
omitted keys keep the inference defaults. A YAML file can hold the profile instead:
"gpunode_profile_file": "profiles/inference.yaml" (inline keys win over the file).
"""

_INFERENCE = {
    # The audited node: MaxReadReq 512 -> 4096 on the GPUs only (NVIDIA, VGA/3D class).
    "max_read_request": 4096,
    "pcie_selector": {"vendor": "10de", "classes": ["0300", "0302"]},
    # GPUDirect RDMA over the ConnectX NICs: fail the run if it can't load.
    "modules": ["nvidia_peermem"],
    "required_modules": ["nvidia_peermem"],
    "sysctls": {"vm.swappiness": 10},
    "max_cstate": 1,
    "amd_pstate": "active",
    "cmdline": {"iommu": "pt"},
    "kernel_pin": "6.8.12-4-pve",
    "nvidia_driver": "550.127.05",
    # Reboot to activate cmdline and kernel changes (otherwise reported as pending reboot).
    "reboot": False,
}

gpu_hosts = [
    ("pve-gpu-01.example.internal", {"ssh_user": "root", "gpunode": _INFERENCE}),
    ("pve-gpu-02.example.internal", {"ssh_user": "root", "gpunode": _INFERENCE}),
]

"""The lab node's gpunode profile: production defaults except where hardware can't exist.

- modules: tcp_bbr stands in for nvidia_peermem, which needs NVIDIA's driver and an RDMA
  stack (ib_core with peer memory); tcp_bbr ships with Debian's kernel and loads through the
  same modprobe + modules-load.d path.
- pcie_selector: the two emulated e1000e endpoints (8086:10d3) stand in for GPUs (10de);
  QEMU keeps their MaxReadReq bits read-only, so the lab proves the refusal path.
- no nvidia_driver pin (no nvidia-smi in the guest).
- reboot: allowed only when GPUNODE_LAB_REBOOT=1, so tests can see "pending reboot" first.

Fault tests add GPUNODE_LAB_CMDLINE="key=value" (one more cmdline parameter),
GPUNODE_LAB_REBOOT_TIMEOUT (seconds), GPUNODE_LAB_BOOTLOADER (grub or systemd-boot: the
Proxmox path, /etc/kernel/cmdline + proxmox-boot-tool refresh), GPUNODE_LAB_KERNEL_PIN=none
(no kernel pin), GPUNODE_LAB_NVIDIA_DRIVER=VERSION (the apt pin and hold of a stand-in NVIDIA
package, tests/lab/test_nvidia_pin.py; with GPUNODE_LAB_NVIDIA_DRIVER_CHANGE=1 the upgrade,
tests/lab/test_driver_upgrade.py, GPUNODE_LAB_DRIVER_CONTAINERS="VMID ..." and
GPUNODE_LAB_DRIVER_DRAIN its containers and drain), GPUNODE_LAB_ACS_REDIRECT=off (clear ACS
redirect on the stand-ins' root ports: QEMU's pcie-root-port has a writable ACS capability) and
GPUNODE_LAB_VERIFY_TIMER=1 (install gpunode-verify.timer) and GPUNODE_LAB_NVIDIA_OPTIONS=1
(nvidia_module_options: the modprobe.d file, tests/lab/test_gpu_boot_lifecycle.py) through the
environment.
"""

from __future__ import annotations

import os
from typing import Any

LAB_SELECTOR = {"vendor": "8086", "device": "10d3", "classes": ["0200"]}
LAB_STAND_IN_MODULE = "tcp_bbr"
LAB_NVIDIA_OPTIONS = {"NVreg_DynamicPowerManagement": 0, "uvm_disable_hmm": 1}


def lab_profile_data(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The profile mapping for inventories/lab.py (host data key "gpunode")."""
    env = os.environ if environ is None else environ
    data: dict[str, Any] = {
        "modules": [LAB_STAND_IN_MODULE],
        "pcie_selector": LAB_SELECTOR,
        "kernel_pin": "running",
        "reboot": env.get("GPUNODE_LAB_REBOOT") == "1",
    }
    if env.get("GPUNODE_LAB_CMDLINE"):
        key, _, value = env["GPUNODE_LAB_CMDLINE"].partition("=")
        data["cmdline"] = {key: value or None}
    if env.get("GPUNODE_LAB_KERNEL_PIN") == "none":
        data["kernel_pin"] = None
    if env.get("GPUNODE_LAB_BOOTLOADER"):
        data["bootloader"] = env["GPUNODE_LAB_BOOTLOADER"]
    if env.get("GPUNODE_LAB_NVIDIA_DRIVER"):
        data["nvidia_driver"] = env["GPUNODE_LAB_NVIDIA_DRIVER"]
    if env.get("GPUNODE_LAB_NVIDIA_DRIVER_CHANGE") == "1":
        data["nvidia_driver_change"] = True
    if env.get("GPUNODE_LAB_DRIVER_CONTAINERS"):
        data["nvidia_driver_containers"] = [int(v) for v in
                                            env["GPUNODE_LAB_DRIVER_CONTAINERS"].split()]
    if env.get("GPUNODE_LAB_DRIVER_DRAIN"):
        data["nvidia_driver_drain"] = env["GPUNODE_LAB_DRIVER_DRAIN"]
    if env.get("GPUNODE_LAB_ACS_REDIRECT"):
        data["pcie_acs_redirect"] = env["GPUNODE_LAB_ACS_REDIRECT"]
    if env.get("GPUNODE_LAB_VERIFY_TIMER") == "1":
        data["verify_timer"] = True
    if env.get("GPUNODE_LAB_NVIDIA_OPTIONS") == "1":
        data["nvidia_module_options"] = LAB_NVIDIA_OPTIONS
    if env.get("GPUNODE_LAB_REBOOT_TIMEOUT"):
        data["reboot_timeout"] = int(env["GPUNODE_LAB_REBOOT_TIMEOUT"])
    return data


LAB_PROFILE = lab_profile_data({})

"""The driver across boots: its device nodes before containers start, and its module options.

- gpunode-nvidia-nodes.service (ordered Before=pve-guests.service and lxc.service) loads
  nvidia-uvm and makes /dev/nvidia-uvm, -uvm-tools, /dev/nvidiaN and the nvidia-caps nodes,
  read back by its script: containers with GPU lines and `onboot: 1` find them at start
  (otherwise /dev/nvidia-uvm appears only at the host's first CUDA use).
- nvidia_module_options -> /etc/modprobe.d/gpunode-nvidia.conf (owned), the initramfs
  refreshed when it holds the NVIDIA module; "pending driver reload / reboot" until
  /proc/driver/nvidia/params or /sys/module/*/parameters show the values.
"""

from __future__ import annotations

from pyinfra import host, logger

from gpunode.facts.snapshot import Needs, node
from gpunode.ops.changes import log_wrapped
from gpunode.ops.files import template_file
from gpunode.ops.services import unit_enabled_at_boot, unit_files
from gpunode.profile.node import NodeProfile
from gpunode.profile.nvidia_options import MODULE_OPTIONS, live_matches, module_param_key

NODES_UNIT = "gpunode-nvidia-nodes.service"
NODES_UNIT_FILE = f"/etc/systemd/system/{NODES_UNIT}"
NODES_SCRIPT = "/usr/local/sbin/gpunode-nvidia-nodes"
MODPROBE_FILE = "/etc/modprobe.d/gpunode-nvidia.conf"
#: After the modprobe.d file changes: rebuild the initramfs only where it loads the module.
INITRAMFS_REFRESH = (
    "if command -v lsinitramfs >/dev/null 2>&1 && lsinitramfs \"/boot/initrd.img-$(uname -r)\" "
    "2>/dev/null | grep -q '/nvidia[^/]*\\.ko'; then update-initramfs -u; fi")
OWNED_FILES = (NODES_UNIT_FILE, NODES_SCRIPT, MODPROBE_FILE)


def driver_boot_needs(profile: NodeProfile) -> Needs:
    return Needs(units=(NODES_UNIT,), files=OWNED_FILES,
                 module_params=tuple(module_param_key(o) for o in profile.nvidia_module_options))


def options_by_module(options: dict[str, int]) -> dict[str, list[tuple[str, int]]]:
    """{"nvidia": [("NVreg_DynamicPowerManagement", 0)], "nvidia_uvm": [...]} (sorted)."""
    out: dict[str, list[tuple[str, int]]] = {}
    for name, value in sorted(options.items()):
        out.setdefault(MODULE_OPTIONS[name].module, []).append((name, value))
    return dict(sorted(out.items()))


def pending_options(profile: NodeProfile) -> list[str]:
    """Options the loaded modules don't show yet ("NVreg_X=0 (live 3)")."""
    live = node().module_params
    return [f"{name}={want} (live {live.get(module_param_key(name), 'not loaded')})"
            for name, want in sorted(profile.nvidia_module_options.items())
            if not live_matches(name, want, live.get(module_param_key(name)))]


def device_nodes_at_boot() -> None:
    """The boot unit that makes the NVIDIA device nodes before containers start."""
    template_file("boot/gpunode-nvidia-nodes.sh.j2", NODES_SCRIPT, mode="755",
                  unit=NODES_UNIT.removesuffix(".service"))
    unit_files(NODES_UNIT, [("systemd/gpunode-nvidia-nodes.service.j2", NODES_UNIT_FILE,
                             {"script": NODES_SCRIPT})])
    unit_enabled_at_boot(NODES_UNIT, "device nodes before containers")


def module_options(profile: NodeProfile) -> None:
    """The modprobe.d file (also emptied when the profile drops every option) and the
    pending note."""
    if not profile.nvidia_module_options and node().file(MODPROBE_FILE) is None:
        return
    template_file("modprobe/gpunode-nvidia.conf.j2", MODPROBE_FILE, after=INITRAMFS_REFRESH,
                  modules=options_by_module(profile.nvidia_module_options))
    pending = pending_options(profile)
    if pending:
        log_wrapped(logger.warning, f"{host.name}: NVIDIA module options pending driver reload "
                    f"/ reboot: {', '.join(pending)}")

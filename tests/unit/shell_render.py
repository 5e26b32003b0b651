"""Every shell text gpunode builds from a declaration, without a host: the scripts it
writes, the files the shell sources (/etc/default/grub) and the command lines it runs.

Used by test_hostile_values.py: whatever a user value can reach, it reaches through these
builders, so a value that passes the schema must leave each text valid shell."""

from __future__ import annotations

from pathlib import Path

from gpunode.facts.cmdline import (
    CmdlineState,
    edit_grub_default,
    merge_cmdline,
    split_cmdline,
)
from gpunode.facts.cpu import CpuState
from gpunode.facts.nvidia_devices import DeviceNode
from gpunode.ops.cmdline import grub_dropin_text, set_grub_default_entry
from gpunode.ops.cpu import sysfs_loop
from gpunode.ops.files import render_template
from gpunode.ops.pcie import acs_write_command, write_and_verify_command
from gpunode.ops.shell import argv_text
from gpunode.ops.sysctl import write_and_verify_command as sysctl_write
from gpunode.profile.container import ContainerSpec, pct_create_args, pct_set_args
from gpunode.profile.node import NodeProfile
from gpunode.profile.sysctls import BEST_EFFORT_SYSCTLS
from gpunode.roles.container.defaults import ContainerSettings
from gpunode.roles.container.plan import install_command
from gpunode.roles.host_tuning import boot_script_variables
from gpunode.roles.kernel import DEBIAN_GRUB_ENTRY, wanted_cmdline
from gpunode.roles.lxc_gpu.ops import append_lines_command, guarded_write_commands
from gpunode.roles.lxc_gpu.plan import new_container_lines

GRUB = (Path(__file__).parents[1] / "data" / "grub" / "debian12-default-grub").read_text()
CPUS = [CpuState(vendor="AuthenticAMD"), CpuState(vendor="GenuineIntel")]
MAJORS = {"nvidia-frontend": 195, "nvidia-uvm": 510}
DEVICES = [DeviceNode(path=f"/dev/nvidia{i}", major=195, minor=i, kind="char") for i in range(8)]


def _text(command: object) -> str:
    return str(getattr(command, "get_raw_value", lambda: command)())


def node_shell(profile: NodeProfile) -> list[str]:
    """The boot script, /etc/default/grub as edited, and every command line."""
    texts = [render_template("boot/gpunode-tune.sh.j2", **boot_script_variables(profile))]
    for cpu in CPUS:
        tokens = merge_cmdline(split_cmdline(""), wanted_cmdline(profile, cpu))
        grub = edit_grub_default(GRUB, tokens)
        if profile.kernel_pin:
            entry = DEBIAN_GRUB_ENTRY.format(version=profile.kernel_pin)
            grub = set_grub_default_entry(grub, entry)
        texts.append(grub)
        state = CmdlineState(grub_default_text=GRUB, grub_dropins={
            "/etc/default/grub.d/50-cloudimg-settings.cfg":
            'GRUB_CMDLINE_LINUX_DEFAULT="console=tty1 console=ttyS0"\n'})
        texts.append(grub_dropin_text(state, wanted_cmdline(profile, cpu), DEBIAN_GRUB_ENTRY))
    for key, value in profile.sysctls.items():
        texts.append(sysctl_write(key, value, key in BEST_EFFORT_SYSCTLS))
    texts += [argv_text("modprobe", name) for name in profile.modules]
    packages = profile.nvidia_packages or ["nvidia-driver"]
    texts.append(argv_text("apt-mark", "hold", *packages))
    texts.append(argv_text("apt-get", "install", "-y", *packages))
    texts.append(acs_write_command("0000:00:01.1"))
    if profile.kernel_pin:
        texts.append(argv_text("proxmox-boot-tool", "kernel", "pin", profile.kernel_pin))
    if profile.cpu_governor:
        texts.append(_text(sysfs_loop([0, 1], "cpufreq/scaling_governor", profile.cpu_governor)))
    texts.append(write_and_verify_command("0000:01:00.0", profile.max_read_request))
    return texts


def container_shell(spec: ContainerSpec) -> list[str]:
    """pct create / set, the config lines appended and the guarded config write."""
    lines = new_container_lines(spec, MAJORS, DEVICES, pve_version="8.2.4")
    texts = [argv_text(*pct_create_args(spec)), argv_text(*pct_set_args(spec, {}))]
    texts.append(_text(append_lines_command(spec.vmid, lines)))
    old, new = "arch: amd64\n", "arch: amd64\n" + "\n".join(lines) + "\n"
    texts += [_text(c) for c in guarded_write_commands(spec.vmid, old, new)
              if hasattr(c, "get_raw_value")]
    return texts


def settings_shell(settings: ContainerSettings) -> list[str]:
    """The userspace install and hold inside the container."""
    version = settings.nvidia_driver or "550.127.05"
    return [_text(install_command(settings.nvidia_packages, version)),
            argv_text("apt-mark", "hold", *settings.nvidia_packages)]

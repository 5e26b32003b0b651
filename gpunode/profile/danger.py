"""Settings that are valid but dangerous: each needs the user's explicit `i_know`.

A profile may name any sysctl, kernel parameter or raw LXC line the patterns allow, and a few
of those quietly weaken the host (ASLR off, setuid core dumps, a root-run helper path), stop
it booting (init=, root=, the NVIDIA modules blacklisted) or open a container to the host
(every device, no AppArmor). Those are refused at validation, before any host is touched,
unless the profile lists the setting's name in `i_know` (NodeProfile.i_know for the host,
ContainerSpec.i_know for a container): the names are the keys of DANGERS.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from gpunode.profile.allowed import shown

#: name -> why it needs an acknowledgement (the name is what `i_know` lists).
DANGERS: dict[str, str] = {
    "kernel.modprobe": "names the program the kernel runs as root to load modules",
    "kernel.randomize_va_space": "0 turns address space layout randomisation off",
    "fs.suid_dumpable": "2 lets setuid programs dump memory (secrets) into core files",
    "vm.nr_hugepages": f"above {262144} pages (512 GiB of 2 MiB pages) it can take more "
                       "memory than the host has and stall it at boot",
    "cmdline.init": "replaces the program the kernel starts first",
    "cmdline.root": "changes the root file system the host boots",
    "cmdline.module_blacklist": "blacklists an NVIDIA module: the GPUs have no driver",
    "cmdline.modprobe.blacklist": "blacklists an NVIDIA module: the GPUs have no driver",
    "pcie_selector.bridges": "the selector matches PCI bridges (class 06): MaxReadReq writes "
                             "reach the bridges above every device",
    "lxc.cgroup2.devices.allow": "'a' gives the container every host device",
    "lxc.apparmor.profile": "'unconfined' drops the container's AppArmor confinement",
}
#: A vm.nr_hugepages above this many pages needs i_know.
HUGEPAGES_LIMIT = 262144
_NVIDIA_MODULE = re.compile(r"(?:^|,)nvidia", re.ASCII)


def _sysctl_dangers(sysctls: Mapping[str, str]) -> list[str]:
    found = []
    if "kernel.modprobe" in sysctls:
        found.append("kernel.modprobe")
    if sysctls.get("kernel.randomize_va_space") == "0":
        found.append("kernel.randomize_va_space")
    if sysctls.get("fs.suid_dumpable") == "2":
        found.append("fs.suid_dumpable")
    pages = sysctls.get("vm.nr_hugepages", "0")
    if pages.isascii() and pages.isdigit() and int(pages) > HUGEPAGES_LIMIT:
        found.append("vm.nr_hugepages")
    return found


def hugepages_above_memory(sysctls: Mapping[str, str], i_know: Iterable[str],
                           meminfo: Mapping[str, int]) -> str | None:
    """The refusal of a vm.nr_hugepages that reserves more than the host's memory
    (pages x Hugepagesize > MemTotal, from /proc/meminfo), None when it fits, when i_know
    names vm.nr_hugepages, or when meminfo lacks the sizes."""
    pages = sysctls.get("vm.nr_hugepages", "")
    if "vm.nr_hugepages" in i_know or not (pages.isascii() and pages.isdigit()):
        return None
    total, page = meminfo.get("MemTotal"), meminfo.get("Hugepagesize")
    if not total or not page or int(pages) * page <= total:
        return None
    gib = 1024 * 1024
    return (f"gpunode.sysctls.vm.nr_hugepages: {pages} pages of {page} KiB is "
            f"{int(pages) * page / gib:.1f} GiB, more than this host's memory (MemTotal "
            f"{total / gib:.1f} GiB): the kernel would take all it can and starve the host. "
            "Fix: lower it, or add vm.nr_hugepages to i_know if you mean it")


def _cmdline_dangers(cmdline: Mapping[str, str | None]) -> list[str]:
    found = [f"cmdline.{key}" for key in ("init", "root") if key in cmdline]
    for key in ("module_blacklist", "modprobe.blacklist"):
        if _NVIDIA_MODULE.search(cmdline.get(key) or ""):
            found.append(f"cmdline.{key}")
    return found


def node_dangers(sysctls: Mapping[str, str], cmdline: Mapping[str, str | None],
                 classes: Iterable[str]) -> list[str]:
    """The DANGERS names a host profile's sysctls, cmdline and PCIe selector classes hit."""
    found = _sysctl_dangers(sysctls) + _cmdline_dangers(cmdline)
    if any(cls.startswith("06") for cls in classes):
        found.append("pcie_selector.bridges")
    return found


def lxc_dangers(entries: Iterable[tuple[str, str]]) -> list[str]:
    """The DANGERS names a container's extra_lxc (key, value) entries hit."""
    found = []
    for key, value in entries:
        words = value.split()
        if key == "lxc.cgroup2.devices.allow" and words[:1] == ["a"]:
            found.append(key)
        if key == "lxc.apparmor.profile" and value.strip() == "unconfined":
            found.append(key)
    return found


def unacknowledged(found: Iterable[str], i_know: Iterable[str]) -> str | None:
    """The refusal for the dangers not listed in i_know, None when all are."""
    missing = [name for name in dict.fromkeys(found) if name not in set(i_know)]
    if not missing:
        return None
    reasons = "; ".join(f"{name}: {DANGERS[name]}" for name in missing)
    return (f"valid but dangerous ({reasons}). Fix: remove it, or add "
            f"{', '.join(repr(n) for n in missing)} to i_know to say you mean it")


def check_i_know(names: list[str]) -> list[str]:
    """A pydantic check of i_know: only names of DANGERS."""
    for name in names:
        if name not in DANGERS:
            raise ValueError(f"{shown(name)} is not a setting that needs i_know; those are: "
                             f"{', '.join(DANGERS)}")
    return names

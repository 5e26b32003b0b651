"""Whether a kernel can drive the NVIDIA GPUs after a reboot: its NVIDIA module (DKMS-built
under /lib/modules/<ver>/updates/dkms, or a precompiled package's) and, on Proxmox, its
headers package (DKMS builds the module for a new kernel from them).

`KernelModuleTrees` lists each /lib/modules/<ver>: its nvidia.ko* files and whether its
build link exists, and the installed kernel headers packages; `boot_module_problem` says, for
the kernel a reboot will start, what is missing and the fix.
"""

from __future__ import annotations

from pydantic import Field
from pyinfra.api import FactBase

from gpunode.facts.sections import FactModel

HEADER_PATTERNS = ("proxmox-headers-*", "pve-headers-*", "linux-headers-*")


class KernelTree(FactModel):
    nvidia_modules: list[str] = Field(default_factory=list)
    """nvidia.ko* files under /lib/modules/<ver> (DKMS's updates/dkms, or a package's)."""
    build: bool = False
    """/lib/modules/<ver>/build exists (the headers DKMS builds against)."""


class BootModules(FactModel):
    kernels: dict[str, KernelTree] = Field(default_factory=dict)
    headers: list[str] = Field(default_factory=list)
    """Installed kernel headers packages (proxmox-headers-6.8.12-4-pve, ...)."""


def parse_kernel_trees(text: str) -> BootModules:
    """Lines "kernel=VER", "build=VER", "VER:PATH" (a module file) and "headers=PACKAGE"."""
    trees: dict[str, dict] = {}
    headers: list[str] = []
    for raw in (text or "").splitlines():
        line = raw.strip()
        key, _, value = line.partition("=")
        if key == "kernel" and value:
            trees.setdefault(value, {"nvidia_modules": [], "build": False})
        elif key == "build" and value:
            trees.setdefault(value, {"nvidia_modules": [], "build": False})["build"] = True
        elif key == "headers" and value:
            headers.append(value)
        elif line.startswith("/lib/modules/"):
            version = line.split("/")[3]
            trees.setdefault(version, {"nvidia_modules": [], "build": False})[
                "nvidia_modules"].append(line)
    return BootModules(kernels={v: KernelTree(**t) for v, t in sorted(trees.items())},
                       headers=sorted(set(headers)))


def proxmox_headers_package(version: str) -> str:
    return f"proxmox-headers-{version}"


def boot_module_problem(version: str, trees: BootModules, proxmox: bool) -> str | None:
    """What the kernel `version` lacks to load the NVIDIA driver after a reboot, with the fix;
    None when it has the module (and on Proxmox its headers)."""
    tree = trees.kernels.get(version)
    missing = []
    if tree is None or not tree.nvidia_modules:
        missing.append("no NVIDIA kernel module built for it (no nvidia.ko under "
                       f"/lib/modules/{version})")
    headers = proxmox_headers_package(version)
    if proxmox and headers not in trees.headers and f"pve-headers-{version}" not in trees.headers:
        missing.append(f"{headers} is not installed (DKMS needs it to build the module)")
    if not missing:
        return None
    fix = (f"apt install {headers} && dkms autoinstall -k {version}" if proxmox
           else f"apt install linux-headers-{version} && dkms autoinstall -k {version}")
    return (f"kernel {version}: {'; '.join(missing)}. Fix: {fix} (or the precompiled NVIDIA "
            "module package for that kernel), then check with "
            f"ls /lib/modules/{version}/updates/dkms/")


# Where an nvidia.ko lives inside a kernel's own kernel/ tree (else it is outside it: DKMS's
# updates/dkms, extra/): NVIDIA's .run installer (kernel/drivers/video) and Ubuntu's precompiled
# linux-modules-nvidia-* (kernel/nvidia-<branch>). `find` skips the rest of kernel/, the
# in-tree modules (thousands of files a kernel): 0.28 s -> 0.09 s in the lab's TCG guest.
IN_TREE_GLOBS = ("kernel/drivers/video/nvidia.ko*", "kernel/nvidia*/nvidia.ko*")
FIND_OUTSIDE_TREE = "-path '/lib/modules/*/kernel' -prune -o -name 'nvidia.ko*' -print"
"""find's expression after `find /lib/modules`: every nvidia.ko* but in the pruned kernel/."""


class KernelModuleTrees(FactBase):
    """Each installed kernel's NVIDIA modules and build link (one `find` for all kernels, its
    in-tree kernel/ folder pruned but for IN_TREE_GLOBS; the headers packages come from the
    run's one dpkg read: gpunode.facts.snapshot)."""

    @staticmethod
    def default() -> BootModules:
        return BootModules()

    def command(self) -> str:
        return ("for d in /lib/modules/*/; do [ -d \"$d\" ] || continue; v=${d%/}; v=${v##*/}; "
                "echo \"kernel=$v\"; [ -e \"$d/build\" ] && echo \"build=$v\"; done; "
                f"find /lib/modules/ -mindepth 2 {FIND_OUTSIDE_TREE} 2>/dev/null; for f in "
                + " ".join(f"/lib/modules/*/{g}" for g in IN_TREE_GLOBS)
                + "; do [ -e \"$f\" ] && echo \"$f\"; done; true")

    def process(self, output: list[str]) -> BootModules:
        return parse_kernel_trees("\n".join(output))

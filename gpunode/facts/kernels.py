"""Installed and running kernels, and held packages.

`parse_kernel_packages(uname_r, dpkg_query_text, showhold_text)` reads:
- `uname -r` ("6.8.12-4-pve");
- `dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' 'linux-image-*'
  'proxmox-kernel-*' 'pve-kernel-*'` ("proxmox-kernel-6.8.12-4-pve-signed 6.8.12-4 ii ");
  `dpkg -l` lines ("ii  pve-kernel-5.15.30-2-pve  5.15.30-3  amd64  ...") are read as well;
- the held packages, one a line, as `apt-mark showhold` prints them (the snapshot takes all
  three from its one read: `RunningKernel` and gpunode.facts.dpkg.DebianPackages).

Only installed packages count ("ii", or "hi" when held). Package names map to kernel versions:
`proxmox-kernel-6.17.2-2-pve-signed` and `proxmox-kernel-6.8.12-4-pve` -> "6.17.2-2-pve" /
"6.8.12-4-pve", `pve-kernel-5.15.30-2-pve` -> "5.15.30-2-pve", `linux-image-6.1.0-31-amd64`
(and its `-unsigned` twin) -> "6.1.0-31-amd64", Debian 13's `linux-image-6.12.117+deb13-amd64`
-> "6.12.117+deb13-amd64". Meta packages that install no kernel of their own
(`proxmox-kernel-6.17`, `proxmox-default-kernel`, `pve-kernel-5.15`, `linux-image-amd64`,
`linux-image-cloud-amd64`), helpers (`pve-kernel-helper`, `proxmox-kernel-helper`) and debug
symbols (`-dbg`) are skipped.

Versions sort newest first as dpkg orders them (gpunode.facts.debversion): "7.0.0-3-pve"
after "6.17.2-2-pve", "6.1.0-50-amd64" after "6.1.0-29-amd64"; never as strings.
"""

from __future__ import annotations

import re

from pydantic import Field
from pyinfra.api import FactBase

from gpunode.profile.allowed import is_kernel_release

from .debversion import version_key
from .sections import FactModel

__all__ = [
    "KERNELS_MARKER_DPKG",
    "KERNELS_MARKER_HOLD",
    "KERNELS_MARKER_UNAME",
    "KERNEL_PATTERNS",
    "RunningKernel",
    "KernelPackages",
    "kernel_version_from_package",
    "is_kernel_release",
    "kernel_version_key",
    "parse_installed_kernels",
    "parse_kernel_packages",
]


class KernelPackages(FactModel):
    running: str
    """`uname -r`; "" when unknown."""
    installed: list[str] = Field(default_factory=list)
    """Installed kernel versions, newest first, without duplicates."""
    held_packages: list[str] = Field(default_factory=list)
    """`apt-mark showhold`, as printed."""
    newest: str | None = None
    packages: dict[str, str] = Field(default_factory=dict)
    """Installed kernel package name -> kernel version it provides."""

    @property
    def reboot_pending(self) -> bool:
        """A newer kernel than the running one is installed (Proxmox writes no
        /var/run/reboot-required). A pinned kernel changes the answer: compare with it."""
        return bool(self.newest and self.running and self.newest != self.running)


_STATUS_RE = re.compile(r"^[uihrp][ncHUFWti][R ]?$")
_PREFIXES = ("proxmox-kernel-", "pve-kernel-", "linux-image-")
def kernel_version_from_package(package: str) -> str | None:
    """Kernel version a package installs, or None for meta/helper/debug packages."""
    name = package.strip().split(":", 1)[0]  # drop ":amd64"
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            rest = name[len(prefix) :]
            break
    else:
        return None
    if prefix == "linux-image-" and rest.startswith("unsigned-"):
        rest = rest[len("unsigned-") :]  # Ubuntu: linux-image-unsigned-6.8.0-45-generic
    if rest.endswith("-dbg") or rest.endswith("-dbgsym"):
        return None
    for suffix in ("-signed", "-unsigned"):
        if rest.endswith(suffix):
            rest = rest[: -len(suffix)]
    return rest if is_kernel_release(rest) else None


kernel_version_key = version_key
"""Sort key for kernel releases: dpkg's order (gpunode.facts.debversion)."""


def is_installed_status(status: str) -> bool:
    """dpkg's Status-Abbrev says installed: second letter 'i' ('ii', and 'hi' when held)."""
    return len(status) >= 2 and status[1] == "i"


def _parse_package_line(line: str) -> tuple[str, str] | None:
    """(package, status) from a dpkg-query or dpkg -l line; None if unreadable."""
    parts = line.split()
    if not parts:
        return None
    if _STATUS_RE.match(parts[0]) and len(parts) >= 2:
        return parts[1], parts[0]  # dpkg -l: "ii  name  version  arch  description"
    if len(parts) >= 3 and _STATUS_RE.match(parts[2]):
        return parts[0], parts[2]  # dpkg-query: "name version ii"
    return None


def parse_kernel_packages(uname_r: str, dpkg_query_text: str, showhold_text: str) -> KernelPackages:
    """Combine `uname -r`, the dpkg kernel package list and `apt-mark showhold`."""
    running = (uname_r or "").strip().splitlines()
    packages: dict[str, str] = {}
    for line in (dpkg_query_text or "").splitlines():
        parsed = _parse_package_line(line)
        if parsed is None:
            continue
        package, status = parsed
        if not is_installed_status(status):
            continue
        version = kernel_version_from_package(package)
        if version is not None:
            packages[package.split(":", 1)[0]] = version
    installed = sorted(set(packages.values()), key=kernel_version_key, reverse=True)
    held = [
        line.strip()
        for line in (showhold_text or "").splitlines()
        if line.strip() and " " not in line.strip()
    ]
    return KernelPackages(
        running=running[0].strip() if running else "",
        installed=installed,
        held_packages=held,
        newest=installed[0] if installed else None,
        packages=packages,
    )


KERNELS_MARKER_UNAME = "--- gpunode: uname -r ---"
KERNELS_MARKER_DPKG = "--- gpunode: dpkg-query kernels ---"
KERNELS_MARKER_HOLD = "--- gpunode: apt-mark showhold ---"  # kept: captured outputs carry it


def parse_installed_kernels(text: str) -> KernelPackages:
    """Split a kernels listing at its marker lines (captured outputs carry them) and parse it."""
    sections: dict[str, list[str]] = {"uname": [], "dpkg": [], "hold": []}
    current: str | None = None
    markers = {
        KERNELS_MARKER_UNAME: "uname",
        KERNELS_MARKER_DPKG: "dpkg",
        KERNELS_MARKER_HOLD: "hold",
    }
    for line in (text or "").splitlines():
        if line.strip() in markers:
            current = markers[line.strip()]
            continue
        if current is not None:
            sections[current].append(line)
    return parse_kernel_packages(
        "\n".join(sections["uname"]), "\n".join(sections["dpkg"]), "\n".join(sections["hold"])
    )


#: The packages that install a kernel (kernel_version_from_package says which of them do).
KERNEL_PATTERNS = ("linux-image-*", "proxmox-kernel-*", "pve-kernel-*")


class RunningKernel(FactBase):
    """The running kernel's release, as `uname -r` prints it, read from /proc/version ("Linux
    version RELEASE (...)") by the shell's own `read` (no process)."""

    def command(self) -> str:
        return 'r=; read -r _ _ r _ < /proc/version; echo "$r"'

    def process(self, output: list[str]) -> str:
        return output[0].strip() if output else ""

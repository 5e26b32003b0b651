"""Proxmox VE version and boot-loader state.

- `parse_pveversion()`: `pveversion` ("pve-manager/8.2.4/faa83925c9641325 (running kernel:
  6.8.12-1-pve)", PVE 7 prints "pve-manager/7.4-3/9002ab8a ...") and the first two lines of
  `pveversion -v` ("proxmox-ve: 8.3.0 (running kernel: ...)", "pve-manager: 8.3.2 (running
  version: 8.3.2/...)").
- `parse_proxmox_boot_tool_status()`: which boot loader the kernel command line belongs to,
  and the ESPs the tool skipped (`EspProblem`: stale UUID, failed mount...).
- `parse_proxmox_kernel_list()`: kernels kept on the ESPs and the pinned one.

Boot loader decision (`BootToolStatus.mode`), from proxmox-boot-tool's own logic
(proxmox-kernel-helper, `_status_detail`: an ESP is reported "uefi" when it holds
systemd-boot's loader.conf, "grub" when it holds a grub directory):

| status output                                          | mode           | managed |
|--------------------------------------------------------|----------------|---------|
| an ESP "is configured with: uefi (versions: ...)"      | "systemd-boot" | True    |
|   ... unless "System currently booted with legacy bios"| "grub"         | True    |
| ESPs "configured with: grub (versions: ...)" only      | "grub"         | True    |
| "E: /etc/kernel/proxmox-boot-uuids does not exist."    | "grub"         | False   |
| anything else from the tool                            | "unknown"      | False   |
| no output at all (tool missing: not a PVE host)        | None, present=False      |

ESPs the tool lists in /etc/kernel/proxmox-boot-uuids but skips are `esp_problems`, never
dropped silently: `esp_problem_message()` names each with its fix. The lines come from
proxmox-kernel-helper's `_status_detail` (the same in Proxmox VE 8 and 9):
"WARN: /dev/disk/by-uuid/UUID does not exist - clean '/etc/kernel/proxmox-boot-uuids'! -
skipping" (a replaced disk), mount's own error then "mount of /dev/disk/by-uuid/UUID failed -
skipping" (a broken FAT), "WARN: X read from ... does not look like a VFAT-UUID - skipping",
"creation of mountpoint ... failed - skipping", "umount of ... failed - failure", and an ESP
"configured with:" nothing (neither systemd-boot nor GRUB on it).

"Does not exist" is what every ext4/xfs (LVM) install prints: the ESP list was never created
because the plain Debian GRUB boots the host, so the command line lives in /etc/default/grub
and update-grub applies it. With "systemd-boot" the command line is /etc/kernel/cmdline and
`proxmox-boot-tool refresh` applies it; with a managed "grub" (ZFS on legacy BIOS or with
Secure Boot) it is /etc/default/grub, then `proxmox-boot-tool refresh` (which runs
update-grub for the ESPs).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field
from pyinfra.api import FactBase

from .sections import FactModel

__all__ = [
    "BOOT_TOOL_SECTION_MARKER",
    "BootToolStatus",
    "EspProblem",
    "ProxmoxBootInfo",
    "ProxmoxBootTool",
    "PveVersion",
    "PveVersionFact",
    "esp_problem_message",
    "parse_proxmox_boot_tool",
    "parse_proxmox_boot_tool_status",
    "parse_proxmox_kernel_list",
    "parse_pveversion",
]


class PveVersion(FactModel):
    present: bool
    manager_version: str | None = None
    """pve-manager version: "8.2.4" (PVE 8+) or "7.4-3" (PVE 7 style)."""
    running_kernel: str | None = None
    """Running kernel, "6.8.12-1-pve"."""


EspProblemKind = Literal[
    "missing", "mount failed", "not a VFAT UUID", "no boot loader", "umount failed"
]


class EspProblem(FactModel):
    """An ESP of /etc/kernel/proxmox-boot-uuids that proxmox-boot-tool skipped or could not
    read: it gets no kernel and no command line on the next refresh."""

    uuid: str
    problem: EspProblemKind
    detail: str = ""
    """The tool's own line(s), e.g. mount's "can't read superblock on /dev/sdc2."."""


class BootToolStatus(FactModel):
    present: bool
    """proxmox-boot-tool exists (the host is Proxmox VE)."""
    mode: Literal["grub", "systemd-boot", "unknown"] | None = None
    esps: list[str] = Field(default_factory=list)
    """VFAT UUIDs of the synced ESPs ("6D31-87F4"), in output order."""
    managed: bool = False
    """ESPs are kept in sync by proxmox-boot-tool (apply cmdline with `... refresh`)."""
    booted_uefi: bool | None = None
    """True for "System currently booted with uefi", False for "legacy bios", else None."""
    kernels_on_esps: list[str] = Field(default_factory=list)
    """Kernel versions found on the ESPs (union, output order)."""
    esp_problems: list[EspProblem] = Field(default_factory=list)
    """ESPs listed in /etc/kernel/proxmox-boot-uuids but skipped (see the module docstring)."""


class ProxmoxBootInfo(FactModel):
    """`proxmox-boot-tool status` and `proxmox-boot-tool kernel list` together."""

    status: BootToolStatus
    kernels: list[str] = Field(default_factory=list)
    """Manually plus automatically selected kernels."""
    pinned: str | None = None
    next_boot: str | None = None
    """The "Kernel pinned on next-boot" entry (`kernel pin VER --next-boot`)."""


# --- pveversion ----------------------------------------------------------------------------

_MANAGER_SHORT_RE = re.compile(r"pve-manager/(?P<version>[0-9][^/\s]*)")
_MANAGER_LONG_RE = re.compile(r"^pve-manager:\s*(?P<version>[0-9]\S*)", re.MULTILINE)
_RUNNING_KERNEL_RE = re.compile(r"\(running kernel:\s*(?P<kernel>[^)\s]+)\s*\)")


def parse_pveversion(text: str) -> PveVersion:
    """Parse `pveversion` or `pveversion -v`; present=False when neither form is found."""
    if not text:
        return PveVersion(present=False)
    manager = _MANAGER_SHORT_RE.search(text) or _MANAGER_LONG_RE.search(text)
    kernel = _RUNNING_KERNEL_RE.search(text)
    if manager is None and kernel is None:
        return PveVersion(present=False)
    return PveVersion(
        present=True,
        manager_version=manager.group("version") if manager else None,
        running_kernel=kernel.group("kernel") if kernel else None,
    )


# --- proxmox-boot-tool status ----------------------------------------------------------------

_ESP_RE = re.compile(
    r"^(?P<uuid>[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4})\s+is configured with:\s*(?P<what>.*)$"
)
_LOADER_RE = re.compile(r"(?P<loader>uefi|grub)\s*\(versions:\s*(?P<versions>[^)]*)\)")
_NOT_CONFIGURED = "proxmox-boot-uuids does not exist"
_BY_UUID = r"/dev/disk/by-uuid/(?P<uuid>\S+)"
_SKIP_RES: tuple[tuple[re.Pattern[str], EspProblemKind], ...] = (
    (re.compile(rf"^WARN: {_BY_UUID} does not exist - clean '[^']*'! - skipping$"), "missing"),
    (re.compile(rf"^mount of {_BY_UUID} failed - skipping$"), "mount failed"),
    (re.compile(r"^creation of mountpoint \S*/(?P<uuid>[^/\s]+) failed - skipping$"),
     "mount failed"),
    (re.compile(r"^WARN: (?P<uuid>.*) read from \S+ does not look like a VFAT-UUID - skipping$"),
     "not a VFAT UUID"),
    (re.compile(rf"^umount of {_BY_UUID} failed - failure$"), "umount failed"),
)
# mount's own error, printed just before "mount of ... failed": "mount: /var/tmp/espmounts/
# 1FDE-91BC: can't read superblock on /dev/sdc2." and its indented continuation lines.
_MOUNT_ERROR_RE = re.compile(r"^mount: \S*/espmounts/(?P<uuid>[^/:\s]+): (?P<error>.*)$")


def _esp_problem(line: str, mount_errors: dict[str, str]) -> EspProblem | None:
    """The EspProblem a status line reports, or None."""
    for pattern, kind in _SKIP_RES:
        match = pattern.match(line)
        if match:
            uuid = match.group("uuid").strip()
            detail = mount_errors.get(uuid, "") if kind == "mount failed" else ""
            return EspProblem(uuid=uuid, problem=kind, detail=detail or line)
    return None


def _mount_errors(lines: list[str]) -> dict[str, str]:
    """{uuid: mount's error text} from `mount: .../espmounts/UUID: ...` lines."""
    errors: dict[str, str] = {}
    for line in lines:
        match = _MOUNT_ERROR_RE.match(line)
        if match:
            errors[match.group("uuid")] = match.group("error").strip()
    return errors


def _esp_line(esp: re.Match[str], line: str, esps: list[str], loaders: set[str],
              kernels: list[str], problems: list[EspProblem]) -> None:
    """One "UUID is configured with: uefi (versions), grub (versions)" line, into the lists."""
    if esp.group("uuid") not in esps:
        esps.append(esp.group("uuid"))
    found = list(_LOADER_RE.finditer(esp.group("what")))
    if not found:
        problems.append(EspProblem(uuid=esp.group("uuid"), problem="no boot loader",
                                   detail=line))
    for loader in found:
        loaders.add(loader.group("loader"))
        for version in loader.group("versions").split(","):
            version = version.strip()
            if version and version not in kernels:
                kernels.append(version)


def _boot_mode(esps: list[str], loaders: set[str], booted_uefi: bool | None,
               not_configured: bool) -> Literal["grub", "systemd-boot", "unknown"]:
    if esps and "uefi" in loaders and booted_uefi is not False:
        return "systemd-boot"
    if (esps and loaders) or (not_configured and not esps):
        return "grub"
    return "unknown"


def parse_proxmox_boot_tool_status(text: str) -> BootToolStatus:
    """Parse `proxmox-boot-tool status 2>&1` (see the module docstring for the mode table)."""
    if not text or not text.strip():
        return BootToolStatus(present=False)
    lines = [raw.strip() for raw in text.splitlines()]
    mount_errors = _mount_errors(lines)
    booted_uefi: bool | None = None
    esps: list[str] = []
    loaders: set[str] = set()
    kernels: list[str] = []
    problems: list[EspProblem] = []
    not_configured = False
    for line in lines:
        if line.startswith("System currently booted with"):
            booted_uefi = "uefi" in line
            continue
        if _NOT_CONFIGURED in line and line.startswith("E:"):
            not_configured = True
            continue
        problem = _esp_problem(line, mount_errors)
        if problem is not None:
            problems.append(problem)
            continue
        esp = _ESP_RE.match(line)
        if esp:
            _esp_line(esp, line, esps, loaders, kernels, problems)
    return BootToolStatus(
        present=True,
        mode=_boot_mode(esps, loaders, booted_uefi, not_configured),
        esps=esps,
        managed=bool(esps),
        booted_uefi=booted_uefi,
        kernels_on_esps=kernels,
        esp_problems=problems,
    )


_ESP_FIXES: dict[str, str] = {
    "missing": "the disk is gone or was replaced: `proxmox-boot-tool clean` removes the UUID; "
    "after a disk replacement `proxmox-boot-tool format /dev/NEW-ESP` then "
    "`proxmox-boot-tool init /dev/NEW-ESP` (add `grub` on a GRUB host)",
    "mount failed": "check the disk (dmesg, smartctl) and its FAT (`fsck.vfat -a "
    "/dev/THAT-PARTITION`); if it stays unreadable, `proxmox-boot-tool format "
    "/dev/THAT-PARTITION --force` then `proxmox-boot-tool init /dev/THAT-PARTITION` (add "
    "`grub` on a GRUB host), or `proxmox-boot-tool clean` once the disk is gone",
    "not a VFAT UUID": "edit /etc/kernel/proxmox-boot-uuids: one VFAT UUID (XXXX-XXXX) a line",
    "no boot loader": "`proxmox-boot-tool reinit` installs the boot loader on every listed ESP",
    "umount failed": "something holds the ESP mounted: `fuser -vm /var/tmp/espmounts/*`, then "
    "run `proxmox-boot-tool status` again",
}


_DEVICE_RE = re.compile(r" on (/dev/[^\s,]+?)\.?$")


def esp_problem_message(problem: EspProblem) -> str:
    """'ESP UUID: what happened; fix' (the partition named where mount's error names it)."""
    what = {
        "missing": "listed in /etc/kernel/proxmox-boot-uuids but no such partition",
        "mount failed": "proxmox-boot-tool could not mount it",
        "not a VFAT UUID": "a line of /etc/kernel/proxmox-boot-uuids is not a VFAT UUID",
        "no boot loader": "neither systemd-boot nor GRUB is on it",
        "umount failed": "proxmox-boot-tool could not unmount it",
    }[problem.problem]
    if problem.problem == "mount failed" and not problem.detail.startswith("mount of"):
        what += f" ({problem.detail})"
    fix = _ESP_FIXES[problem.problem]
    device = _DEVICE_RE.search(problem.detail)
    if device:
        fix = fix.replace("/dev/THAT-PARTITION", device.group(1))
    return (f"ESP {problem.uuid}: {what}; it gets no kernel or command line on "
            f"`proxmox-boot-tool refresh`. Fix: {fix}")


# --- proxmox-boot-tool kernel list ---------------------------------------------------------------

_SECTION_HEADERS = {
    "Manually selected kernels:": "manual",
    "Automatically selected kernels:": "auto",
    "Pinned kernel:": "pinned",
    "Kernel pinned on next-boot:": "next_boot",
}


def _kernel_list_sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        if line in _SECTION_HEADERS:
            current = _SECTION_HEADERS[line]
            sections.setdefault(current, [])
            continue
        if current is None or line == "None." or " " in line:
            continue
        sections[current].append(line)
    return sections


def parse_proxmox_kernel_list(text: str) -> tuple[list[str], str | None]:
    """(manually + automatically selected kernels, pinned kernel or None)."""
    sections = _kernel_list_sections(text)
    kernels: list[str] = []
    for key in ("manual", "auto"):
        for kernel in sections.get(key, []):
            if kernel not in kernels:
                kernels.append(kernel)
    pinned = sections.get("pinned") or []
    return kernels, pinned[0] if pinned else None


BOOT_TOOL_SECTION_MARKER = "--- gpunode: proxmox-boot-tool kernel list ---"


def parse_proxmox_boot_tool(text: str) -> ProxmoxBootInfo:
    """Parse the `ProxmoxBootTool` fact output: status, the marker line, then kernel list."""
    status_text, _, list_text = (text or "").partition(BOOT_TOOL_SECTION_MARKER)
    status = parse_proxmox_boot_tool_status(status_text)
    kernels, pinned = parse_proxmox_kernel_list(list_text)
    next_boots = _kernel_list_sections(list_text).get("next_boot") or []
    next_boot = next_boots[0] if next_boots else None
    if not status.present and (kernels or pinned):
        status = BootToolStatus(present=True, mode="unknown")
    return ProxmoxBootInfo(status=status, kernels=kernels, pinned=pinned, next_boot=next_boot)


# --- facts -------------------------------------------------------------------------------------


class PveVersionFact(FactBase):
    """`pveversion` as `PveVersion`; present=False on hosts without Proxmox VE."""

    @staticmethod
    def default() -> PveVersion:
        return PveVersion(present=False)

    def command(self) -> str:
        return "command -v pveversion >/dev/null 2>&1 && pveversion 2>/dev/null || true"

    def process(self, output: list[str]) -> PveVersion:
        return parse_pveversion("\n".join(output))


class ProxmoxBootTool(FactBase):
    """`proxmox-boot-tool status` + `kernel list` in one round trip, as `ProxmoxBootInfo`.

    Needs root (status mounts the ESPs). Without proxmox-boot-tool: status.present=False.
    """

    @staticmethod
    def default() -> ProxmoxBootInfo:
        return ProxmoxBootInfo(status=BootToolStatus(present=False))

    def command(self) -> str:
        return (
            "if command -v proxmox-boot-tool >/dev/null 2>&1; then "
            "proxmox-boot-tool status 2>&1; "
            f"echo '{BOOT_TOOL_SECTION_MARKER}'; "
            "proxmox-boot-tool kernel list 2>&1; "
            "fi; true"
        )

    def process(self, output: list[str]) -> ProxmoxBootInfo:
        return parse_proxmox_boot_tool("\n".join(output))

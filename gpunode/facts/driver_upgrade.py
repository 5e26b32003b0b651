"""What a driver upgrade needs beyond the run's one dpkg read: apt's version table of each
driver package (is the new version offered, and the old one, for the way back), the
processes holding /dev/nvidia* (host and container processes alike: one kernel), the
following containers' own driver packages (`pct exec VMID -- dpkg-query`), and the
previous version gpunode recorded. One part of the run's one read (gpunode.facts.node_read).
"""

from __future__ import annotations

import re
import shlex

from pydantic import Field
from pyinfra.api import FactBase

from gpunode.facts.dpkg import parse_dpkg_query
from gpunode.facts.sections import FactModel

__all__ = ["DriverUpgradeRead", "DriverUpgradeState", "GpuHolder", "RECORD_FILE",
           "driver_upgrade_command", "parse_driver_upgrade", "parse_policy_versions",
           "parse_pct_status"]

RECORD_FILE = "/var/lib/gpunode/nvidia-driver-previous"
"""One line 'OLD NEW': the version before the last switch and the one switched to."""

PATTERNS = ("libnvidia-*", "libcuda1", "nvidia-*", "cuda-drivers*", "libnvcuvid1", "libnvoptix1",
            "firmware-nvidia-gsp*", "lib*-nvidia*", "xserver-xorg-video-nvidia*")
"""dpkg-query patterns covering the driver release's names (packages.py keeps the release's)."""
_VERSION_LINE = re.compile(r"^\s+(?:\*\*\* )?(\S+) (-?[0-9]+)$")
_CGROUP_CT = re.compile(r"/lxc(?:\.payload)?[./]([0-9]+)(?:/|$)")


class GpuHolder(FactModel):
    pid: int
    command: str = ""
    container: int | None = None
    """The LXC container's id from /proc/PID/cgroup (lxc/VMID, lxc.payload.VMID)."""


class ContainerPackages(FactModel):
    status: str = ""
    """`pct status` ("running", "stopped"); "" when unreadable."""
    packages: dict[str, str] = Field(default_factory=dict)
    versions: dict[str, list[str]] = Field(default_factory=dict)
    """The container's own apt: package -> versions offered."""
    read: bool = False
    """dpkg-query ran in it (only a running container can be read)."""


class DriverUpgradeState(FactModel):
    versions: dict[str, list[str]] = Field(default_factory=dict)
    """apt-cache policy: package -> versions apt offers (installed one included)."""
    holders: list[GpuHolder] = Field(default_factory=list)
    containers: dict[int, ContainerPackages] = Field(default_factory=dict)
    previous: str | None = None
    switched_to: str | None = None


def parse_policy_versions(text: str) -> dict[str, list[str]]:
    """`apt-cache policy PKG...` -> {package: versions a repository offers, as listed}. A
    version whose only source is /var/lib/dpkg/status (installed, offered by no repository:
    no way to install it again) is left out. Version lines are told by their shape
    ('VERSION PRIORITY'), not by the table's label, which apt translates."""
    out: dict[str, list[str]] = {}
    package = version = None
    for line in text.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith(":"):
            package, version = line.rstrip()[:-1], None
            out[package] = []
        elif package and (m := _VERSION_LINE.match(line)):
            version = m.group(1)
        elif package and version and line.strip() and (
                "/var/lib/dpkg/status" not in line) and version not in out[package]:
            out[package].append(version)
    return out


def parse_pct_status(text: str) -> str:
    """`pct status VMID` ("status: running") -> "running"; "" when not that shape."""
    key, _, value = text.strip().partition(":")
    return value.strip() if key == "status" else ""


def holder_from_line(line: str) -> GpuHolder | None:
    """'PID<TAB>COMM<TAB>CGROUP-LINE' -> a holder."""
    parts = line.split("\t")
    if not parts[0].isdigit():
        return None
    cgroup = parts[2] if len(parts) > 2 else ""
    m = _CGROUP_CT.search(cgroup)
    return GpuHolder(pid=int(parts[0]), command=parts[1] if len(parts) > 1 else "",
                     container=int(m.group(1)) if m else None)


HOLDER_PIDS = ("find /proc/[0-9]*/fd -maxdepth 1 -lname '/dev/nvidia*' 2>/dev/null "
               "| sed -n 's#^/proc/\\([0-9]*\\)/fd/.*#\\1#p' | sort -u")
"""Shell: the PIDs with a /dev/nvidia* file open, one a line: one `find` over every
/proc/PID/fd (a readlink a descriptor took 13 s on the lab guest, 0.2 s so). The read below
and the switch's script (templates/shell/driver-upgrade.sh.j2) both use it."""
HOLDERS = (
    f"echo '@@ holders'; for _du_p in $({HOLDER_PIDS}); do "
    "printf '%s\\t%s\\t%s\\n' \"$_du_p\" \"$(cat /proc/$_du_p/comm 2>/dev/null)\" "
    "\"$(head -n1 /proc/$_du_p/cgroup 2>/dev/null)\"; done")
"""PID, command and first cgroup line of each process with a /dev/nvidia* file open."""


def driver_upgrade_command(packages: tuple[str, ...], containers: tuple[int, ...]) -> str:
    """The read: sections between '@@ NAME' lines."""
    patterns = " ".join(shlex.quote(p) for p in PATTERNS)
    names = (shlex.quote(" ".join(packages)) if packages else
             f"$(dpkg-query -W -f '${{db:Status-Abbrev}} ${{Package}}\\n' {patterns} 2>/dev/null"
             " | awk '$1 ~ /^[ih]i/ {print $2}')")
    parts = ["echo '@@ policy'", f"_du_n={names}",
             "[ -z \"$_du_n\" ] || LC_ALL=C apt-cache policy $_du_n 2>/dev/null"]
    parts.append(HOLDERS)
    inner = shlex.quote(
        "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' " + patterns
        + " 2>/dev/null; echo '@@ ctpolicy'; n=$(dpkg-query -W -f '${db:Status-Abbrev} "
        "${Package}\\n' " + patterns + " 2>/dev/null | awk '$1 ~ /^[ih]i/ {print $2}'); "
        "[ -z \"$n\" ] || LC_ALL=C apt-cache policy $n 2>/dev/null; true")
    for vmid in containers:
        v = int(vmid)
        parts.append(
            f"echo '@@ ct {v}'; _du_s=$(pct status {v} 2>/dev/null); echo \"$_du_s\"; "
            f"if [ \"$_du_s\" = 'status: running' ]; then echo '@@ dpkg {v}'; "
            f"pct exec {v} -- sh -c {inner} | sed 's/^@@ ctpolicy$/@@ ctpolicy {v}/'; fi")
    parts.append(f"echo '@@ record'; cat {RECORD_FILE} 2>/dev/null; true")
    return "; ".join(parts)


def _sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    name = ""
    for line in text.splitlines():
        if line.startswith("@@ "):
            name = line[3:].strip()
            out[name] = []
        elif name:
            out[name].append(line)
    return out


def parse_driver_upgrade(text: str) -> DriverUpgradeState:
    """driver_upgrade_command's output -> the state."""
    sections = _sections(text)
    holders = [h for line in sections.get("holders", []) if (h := holder_from_line(line))]
    containers: dict[int, dict] = {}
    for name, lines in sections.items():
        kind, _, vmid = name.partition(" ")
        if kind == "ct" and vmid.isdigit():
            containers.setdefault(int(vmid), {})["status"] = parse_pct_status("\n".join(lines))
        elif kind == "dpkg" and vmid.isdigit():
            containers.setdefault(int(vmid), {}).update(
                packages=parse_dpkg_query("\n".join(lines)), read=True)
        elif kind == "ctpolicy" and vmid.isdigit():
            containers.setdefault(int(vmid), {})["versions"] = parse_policy_versions(
                "\n".join(lines))
    record = " ".join(sections.get("record", [])).split()
    return DriverUpgradeState(
        versions=parse_policy_versions("\n".join(sections.get("policy", []))),
        holders=holders,
        containers={k: ContainerPackages(**v) for k, v in containers.items()},
        previous=record[0] if record else None,
        switched_to=record[1] if len(record) > 1 else None)


class DriverUpgradeRead(FactBase):
    """The driver upgrade's part of the one read (see the module docstring)."""

    @staticmethod
    def default() -> DriverUpgradeState:
        return DriverUpgradeState()

    def command(self, packages: tuple[str, ...] = (), containers: tuple[int, ...] = ()) -> str:
        return driver_upgrade_command(tuple(packages), tuple(containers))

    def process(self, output: list[str]) -> DriverUpgradeState:
        return parse_driver_upgrade("\n".join(output))

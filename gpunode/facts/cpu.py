"""CPU power state: vendor, cpuidle states, C-state caps, cpufreq driver and governors."""

from __future__ import annotations

import re

from pyinfra.api import FactBase

from gpunode.facts.sections import (
    FactModel,
    cat_command,
    grep_lines_command,
    section_command,
    split_sections,
)

CPU_SYSFS = "/sys/devices/system/cpu"
_STATE_FILE = re.compile(r"/cpu(\d+)/cpuidle/state(\d+)/(name|latency|disable)$")
_CSTATE_NAME = re.compile(r"^C(\d+)")
# A state without a C<n> name (e.g. cpuidle-haltpoll's "haltpoll idle" in KVM guests) counts
# as C1 when it wakes this fast, as a deep state otherwise.
SHALLOW_LATENCY_US = 10
UNKNOWN_DEEP_DEPTH = 99


class IdleState(FactModel):
    """One cpuidle state of one CPU, as sysfs shows it."""


    cpu: int
    index: int
    name: str
    latency_us: int
    disabled: bool

    @property
    def depth(self) -> int:
        """The C-state number (POLL = 0, C1E = 1, C6 = 6); other names go by latency."""
        if self.name.upper() == "POLL":
            return 0
        match = _CSTATE_NAME.match(self.name.upper())
        if match:
            return int(match.group(1))
        return 1 if self.latency_us <= SHALLOW_LATENCY_US else UNKNOWN_DEEP_DEPTH

    @property
    def path(self) -> str:
        return f"{CPU_SYSFS}/cpu{self.cpu}/cpuidle/state{self.index}"


class CpuState(FactModel):
    """The CPU power settings gpunode reads back."""


    vendor: str | None = None
    idle_driver: str | None = None
    idle_states: list[IdleState] = []
    max_cstate_params: dict[str, str] = {}
    cpufreq_driver: str | None = None
    governors: dict[int, str] = {}
    available_governors: list[str] = []
    amd_pstate_status: str | None = None

    @property
    def is_amd(self) -> bool:
        return self.vendor == "AuthenticAMD"

    @property
    def is_intel(self) -> bool:
        return self.vendor == "GenuineIntel"


def parse_idle_states(text: str) -> list[IdleState]:
    """`grep -H . .../cpuN/cpuidle/stateM/{name,latency,disable}` output -> states, sorted."""
    fields: dict[tuple[int, int], dict[str, str]] = {}
    for line in text.splitlines():
        path, sep, value = line.partition(":")
        match = _STATE_FILE.search(path)
        if sep and match:
            key = (int(match.group(1)), int(match.group(2)))
            fields.setdefault(key, {})[match.group(3)] = value.strip()
    states = []
    for (cpu, index), values in sorted(fields.items()):
        latency, disable = values.get("latency", ""), values.get("disable", "")
        if "name" in values and latency.isdigit() and disable in ("0", "1"):
            states.append(IdleState(cpu=cpu, index=index, name=values["name"],
                                    latency_us=int(latency), disabled=disable == "1"))
    return states


def parse_key_values(text: str) -> dict[str, str]:
    """Lines of 'KEY VALUE' -> dict (blank and one-word lines are skipped)."""
    pairs = (line.split(None, 1) for line in text.splitlines())
    return {p[0]: p[1].strip() for p in pairs if len(p) == 2}


def parse_governors(text: str) -> dict[int, str]:
    """Lines of '/sys/.../cpuN/cpufreq/scaling_governor GOVERNOR' -> {N: governor}."""
    out: dict[int, str] = {}
    for path, governor in parse_key_values(text).items():
        match = re.search(r"/cpu(\d+)/", path)
        if match:
            out[int(match.group(1))] = governor
    return out


def _first_line(text: str | None) -> str | None:
    lines = (text or "").strip().splitlines()
    return lines[0].strip() if lines else None


def parse_cpu_sections(text: str) -> CpuState:
    """Parse the output of CPU_COMMAND."""
    sections = split_sections(text)
    vendor = re.search(r"vendor_id\s*:\s*(\S+)", sections.get("vendor", ""))
    return CpuState(
        vendor=vendor.group(1) if vendor else None,
        idle_driver=_first_line(sections.get("idle_driver")),
        idle_states=parse_idle_states(sections.get("idle_states", "")),
        max_cstate_params=parse_key_values(sections.get("max_cstate", "")),
        cpufreq_driver=_first_line(sections.get("cpufreq_driver")),
        governors=parse_governors(sections.get("governors", "")),
        available_governors=(sections.get("available_governors") or "").split(),
        amd_pstate_status=_first_line(sections.get("amd_pstate")),
    )


CPU_COMMAND = "; ".join(
    [
        # builtins only (read, case), with grep's output ("vendor_id\t: ...", "PATH:VALUE"):
        # a process costs ~50 ms in the lab's TCG guest (bench/README.md)
        section_command(
            "vendor",
            "while IFS= read -r l; do case $l in *vendor_id*) printf '%s\\n' \"$l\"; break;; "
            "esac; done < /proc/cpuinfo",
        ),
        section_command("idle_driver", cat_command(f"{CPU_SYSFS}/cpuidle/current_driver")),
        section_command(
            "idle_states",
            grep_lines_command(f"{CPU_SYSFS}/cpu[0-9]*/cpuidle/state[0-9]*/name "
                               f"{CPU_SYSFS}/cpu[0-9]*/cpuidle/state[0-9]*/latency "
                               f"{CPU_SYSFS}/cpu[0-9]*/cpuidle/state[0-9]*/disable"),
        ),
        section_command(
            "max_cstate",
            "for m in processor intel_idle; do f=/sys/module/$m/parameters/max_cstate; "
            '[ -r $f ] || continue; v=; read -r v < $f; echo "$m.max_cstate $v"; done',
        ),
        section_command(
            "cpufreq_driver", cat_command(f"{CPU_SYSFS}/cpu0/cpufreq/scaling_driver")
        ),
        section_command(
            "governors",
            f"for f in {CPU_SYSFS}/cpu[0-9]*/cpufreq/scaling_governor; do [ -r $f ] || "
            'continue; v=; read -r v < $f; echo "$f $v"; done',  # builtins: no process a CPU
        ),
        section_command(
            "available_governors",
            cat_command(f"{CPU_SYSFS}/cpu0/cpufreq/scaling_available_governors"),
        ),
        section_command("amd_pstate", cat_command(f"{CPU_SYSFS}/amd_pstate/status")),
    ]
)


class CpuPower(FactBase):
    """Vendor, cpuidle states, C-state caps and cpufreq governors of every CPU."""

    def command(self) -> str:
        return CPU_COMMAND

    def process(self, output: list[str]) -> CpuState:
        return parse_cpu_sections("\n".join(output))

"""CPU power: cap C-states through cpuidle sysfs, set the cpufreq governor (runtime halves).

The persistent halves are the kernel cmdline (gpunode/roles/kernel) and the boot unit
(templates/boot/), which re-applies both at every boot.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import StringCommand, operation

from gpunode.facts.cpu import (
    CPU_SYSFS,
    SHALLOW_LATENCY_US,
    UNKNOWN_DEEP_DEPTH,
    CpuState,
    IdleState,
)
from gpunode.facts.snapshot import node
from gpunode.ops.changes import report_change
from gpunode.ops.shell import script


def states_to_disable(states: list[IdleState], max_cstate: int) -> list[IdleState]:
    """Enabled idle states deeper than the cap (POLL is never disabled)."""
    return [s for s in states if s.depth > max_cstate and s.depth > 0 and not s.disabled]


def cstate_script_variables() -> dict[str, int]:
    """The limits of IdleState.depth for the shell's cstate_depth (gpunode-lib.sh.j2)."""
    return {"cstate_shallow_latency_us": SHALLOW_LATENCY_US,
            "cstate_unknown_depth": UNKNOWN_DEEP_DEPTH}


def cpus_by_state(states: list[IdleState]) -> dict[int, list[int]]:
    """{state index: [cpu, ...]} so one shell loop handles a state on many CPUs."""
    grouped: dict[int, list[int]] = {}
    for state in states:
        grouped.setdefault(state.index, []).append(state.cpu)
    return grouped


def sysfs_loop(cpus: list[int], relative_path: str, value: str) -> StringCommand:
    """One shell loop writing value to cpuN/<relative_path> for the listed CPUs."""
    return script(
        "sysfs-write.sh.j2", cpus=sorted(cpus), value=value, sysfs=CPU_SYSFS, path=relative_path
    )


def cstate_cmdline_params(cpu: CpuState, max_cstate: int | None) -> dict[str, str | None]:
    """Boot parameters that cap C-states for this CPU vendor."""
    if max_cstate is None:
        return {}
    if max_cstate == 0:
        return {"idle": "poll"}
    params: dict[str, str | None] = {"processor.max_cstate": str(max_cstate)}
    if not cpu.is_amd:
        params["intel_idle.max_cstate"] = str(max_cstate)
    return params


def cpu_cmdline_params(
    cpu: CpuState, max_cstate: int | None, amd_pstate: str | None
) -> dict[str, str | None]:
    """C-state caps plus amd_pstate mode (AMD only)."""
    params = cstate_cmdline_params(cpu, max_cstate)
    if cpu.is_amd and amd_pstate:
        params["amd_pstate"] = amd_pstate
    return params


@operation()
def cstate_cap(max_cstate: int = 1):
    """
    Disable cpuidle states deeper than max_cstate on every CPU, now.

    + max_cstate: deepest C-state kept enabled (1 = C1 and C1E)
    """
    cpu = node().cpu
    deeper = states_to_disable(cpu.idle_states, max_cstate)
    for index, cpus in sorted(cpus_by_state(deeper).items()):
        report_change(f"cpuidle state{index} disable on {len(cpus)} CPU(s)", "0", "1",
                      where="runtime; boot unit")
        yield sysfs_loop(cpus, f"cpuidle/state{index}/disable", "1")
    if not deeper:
        if not cpu.idle_states:
            host.noop("no cpuidle states on this node (the cmdline cap still applies)")
        else:
            host.noop(f"no enabled C-state deeper than C{max_cstate}")


@operation()
def cpu_governor(governor: str = "performance"):
    """
    Set the cpufreq scaling governor of every CPU, now.

    + governor: e.g. performance
    """
    cpu = node().cpu
    if not cpu.governors:
        host.noop("no cpufreq on this node (nothing to set)")
        return
    if cpu.available_governors and governor not in cpu.available_governors:
        host.noop(
            f"governor {governor} not offered by {cpu.cpufreq_driver} "
            f"(available: {' '.join(cpu.available_governors)})"
        )
        return
    cpus = [c for c, g in cpu.governors.items() if g != governor]
    if cpus:
        old = ",".join(sorted({cpu.governors[c] for c in cpus}))
        report_change(f"cpufreq governor on {len(cpus)} CPU(s)", old, governor,
                      where="runtime; boot unit")
        yield sysfs_loop(cpus, "cpufreq/scaling_governor", governor)
    else:
        host.noop(f"governor {governor} on all {len(cpu.governors)} CPUs")

"""GPU runtime settings through nvidia-smi: persistence mode and power limits, read back.

Both are lost when the driver unloads (reboot, driver reload, and without nvidia-persistenced
when the last client exits); the boot unit re-applies them (templates/boot/gpunode-tune.sh.j2).
Each write is followed by a read of the same value; a GPU that keeps its old value fails the
operation with the GPU, the value asked and the value read.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyinfra import host
from pyinfra.api import StringCommand, operation
from pyinfra.api.exceptions import OperationValueError

from gpunode.facts.nvidia import PERSISTENCE_ENABLED, NvidiaGpu, NvidiaSmiReport
from gpunode.facts.snapshot import node
from gpunode.ops.changes import report_change
from gpunode.ops.shell import script_text

PowerSetting = int | str | Mapping[int, int | str]


def _watts(gpu: NvidiaGpu, value: int | str) -> float | None:
    if value == "default":
        return gpu.power_default_limit_w
    if value == "max":
        return gpu.power_max_limit_w
    return float(value)


def power_limit_targets(setting: PowerSetting, gpus: list[NvidiaGpu]
                        ) -> tuple[dict[int, int], list[str]]:
    """({GPU index: watts}, problems) for a gpu_power_limit setting and the GPUs read.

    A problem names the GPU, the value and the allowed range (or why it is unknown); a
    per-index setting for a GPU that is not there is a problem too."""
    by_index = {g.index: g for g in gpus}
    wanted = setting if isinstance(setting, Mapping) else {g.index: setting for g in gpus}
    targets: dict[int, int] = {}
    problems: list[str] = []
    for index, value in sorted(wanted.items()):
        gpu = by_index.get(index)
        if gpu is None:
            problems.append(f"gpu_power_limit: GPU{index} is not on this node (GPUs: "
                            f"{', '.join(f'GPU{i}' for i in sorted(by_index)) or 'none'})")
            continue
        watts = _watts(gpu, value)
        low, high = gpu.power_min_limit_w, gpu.power_max_limit_w
        if watts is None or gpu.power_limit_w is None:
            problems.append(f"gpu_power_limit: GPU{index} ({gpu.name}) reports no power "
                            f"limit{'s' if watts is None else ''}: power management not "
                            "supported, nothing set")
            continue
        if low is not None and high is not None and not low <= watts <= high:
            problems.append(f"gpu_power_limit: GPU{index} ({gpu.name}): {value} W is outside "
                            f"its range {low:g}..{high:g} W")
            continue
        targets[index] = int(round(watts))
    return targets, problems


def power_limit_command(index: int, watts: int) -> str:
    """nvidia-smi -pl for one GPU, then the limit read back (integer watts compared;
    templates/shell/power-limit.sh.j2)."""
    return script_text("power-limit.sh.j2", index=index, watts=watts)


PERSISTENCE_COMMAND = (
    "nvidia-smi -pm 1 >/dev/null && "
    "m=$(nvidia-smi --query-gpu=index,persistence_mode --format=csv,noheader) && "
    'if echo "$m" | grep -q Disabled; then echo "gpunode: persistence mode still '
    'Disabled: $m" >&2; exit 1; fi'
)


def smi_report() -> NvidiaSmiReport:
    """nvidia-smi -q -x from the snapshot (present=False: no driver, or not read)."""
    return node().nvidia or NvidiaSmiReport(present=False)


@operation()
def persistence_mode():
    """
    Persistence mode Enabled on every GPU (nvidia-smi -pm 1 talks to nvidia-persistenced),
    read back; nothing to do without nvidia-smi.
    """
    report = smi_report()
    if not report.present:
        host.noop("persistence mode: not applicable (no NVIDIA driver / nvidia-smi)")
        return
    off = [g for g in report.gpus if g.persistence_mode not in (None, PERSISTENCE_ENABLED)]
    if not off:
        host.noop(f"persistence mode Enabled on {len(report.gpus)} GPU(s)")
        return
    for gpu in off:
        report_change(f"GPU{gpu.index} persistence mode", gpu.persistence_mode, PERSISTENCE_ENABLED,
                      where="runtime; the boot unit sets it again after nvidia-persistenced")
    yield StringCommand(PERSISTENCE_COMMAND)


@operation()
def power_limits(setting: PowerSetting):
    """
    Set GPU power limits (nvidia-smi -pl) where they differ, each read back.

    + setting: watts, 'default', 'max', or {GPU index: one of those}
    """
    report = smi_report()
    if not report.present:
        host.noop("power limits: not applicable (no NVIDIA driver / nvidia-smi)")
        return
    targets, problems = power_limit_targets(setting, report.gpus)
    if problems:
        raise OperationValueError("; ".join(problems))
    current = {g.index: g.power_limit_w for g in report.gpus}
    todo = {i: w for i, w in targets.items()
            if current.get(i) is None or int(round(current[i] or 0)) != w}
    for index, watts in todo.items():
        old = current.get(index)
        report_change(f"GPU{index} power limit", f"{old:g} W" if old is not None else None,
                      f"{watts} W", where="runtime; re-applied at boot by gpunode-tune")
        yield StringCommand(power_limit_command(index, watts))
    if not todo:
        host.noop("power limits: " + ", ".join(f"GPU{i} {w} W" for i, w in targets.items()))

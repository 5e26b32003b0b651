"""The driver upgrade's operation: the plan (upgrade_plan.py) from the one read, refused
before any change when it can't be done whole, else one script (driver-upgrade.sh.j2) that
switches host and containers together or puts both back (docs/upgrade.md)."""

from __future__ import annotations

from pyinfra import host
from pyinfra.operations import server

from gpunode.facts.driver_upgrade import (
    HOLDER_PIDS,
    RECORD_FILE,
    DriverUpgradeRead,
    DriverUpgradeState,
)
from gpunode.facts.snapshot import Needs, Part, node
from gpunode.ops.changes import report_change
from gpunode.ops.nvidia_pin import nvidia_pin
from gpunode.ops.preflight import refuse_host
from gpunode.ops.shell import script_text
from gpunode.profile.node import NodeProfile
from gpunode.roles.nvidia_driver.upgrade_plan import UpgradePlan, plan_upgrade

PART = "driver_upgrade"


def upgrade_needs(profile: NodeProfile) -> Needs:
    """The upgrade's part of the one read: apt's versions of the installed NVIDIA packages,
    the GPU holders, the following containers' packages, the record."""
    return Needs(kernels=True, parts=(Part(name=PART, fact=DriverUpgradeRead, kwargs=(
        ("containers", tuple(profile.nvidia_driver_containers)),)),))


def current_plan(profile: NodeProfile) -> UpgradePlan:
    """The plan from the run's snapshot (its upgrade part read on first use)."""
    assert profile.nvidia_driver is not None
    snapshot = node()
    state = snapshot.parts.get(PART)
    if not isinstance(state, DriverUpgradeState):
        state = DriverUpgradeState.model_validate(state or {})
    kernels = snapshot.kernels
    running = kernels.running if kernels else ""
    return plan_upgrade(
        host=host.name, new=profile.nvidia_driver, installed=snapshot.packages, state=state,
        containers=list(profile.nvidia_driver_containers), drain=profile.nvidia_driver_drain,
        reboot=profile.reboot, loaded=snapshot.driver_loaded, running_kernel=running,
        next_kernel=(kernels.newest if kernels else None) or running,
        trees=snapshot.boot_modules)


def script_variables(plan: UpgradePlan, next_kernel: str | None) -> dict:
    return {"host": plan.host, "old": plan.old, "new": plan.new, "packages": plan.packages,
            "containers": plan.containers, "stop": plan.stop, "next_kernel": next_kernel,
            "module_action": plan.module_action, "record_file": RECORD_FILE,
            "record_dir": RECORD_FILE.rsplit("/", 1)[0], "holder_pids": HOLDER_PIDS}


def driver_upgrade(profile: NodeProfile, plan: UpgradePlan) -> None:
    """Refuse, or report each value and run the switch (one remote script)."""
    if refuse_host(plan.refusals):
        return
    if not plan.changes:
        return
    for line in plan.lines():
        report_change("NVIDIA driver upgrade", where=line)
    nvidia_pin(plan.new)
    next_kernel = next((m.kernel for m in plan.modules if "next" in m.role), None)
    text = script_text("driver-upgrade.sh.j2", **script_variables(plan, next_kernel))
    server.shell(name=f"Switch NVIDIA driver {plan.old} -> {plan.new} (host and containers)",
                 commands=[text])

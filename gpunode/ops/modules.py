"""Kernel modules loaded now; which ones apply on this node.

pyinfra's server.modprobe compares names literally with /proc/modules (nvidia-uvm vs
nvidia_uvm) and can't say "not applicable": names are normalised here, and a module that needs
hardware the node lacks (nvidia_peermem without an RDMA device) is reported, not forced.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pyinfra import host
from pyinfra.api import OperationError, StringCommand, operation

from gpunode.facts.kernel_params import KernelParamsState
from gpunode.facts.lock import UNLOAD_FILE
from gpunode.facts.snapshot import node
from gpunode.ops.changes import report_change
from gpunode.ops.shell import argv_text, every_command, quote

# Modules that only make sense with a given kind of device present.
NEEDS_RDMA = frozenset({"nvidia_peermem"})


class ModulePlan(BaseModel):
    """What to do with each wanted module on this node."""

    model_config = ConfigDict(frozen=True)

    load: list[str] = []
    loaded: list[str] = []
    not_applicable: dict[str, str] = {}
    missing_required: dict[str, str] = {}

    @property
    def persist(self) -> list[str]:
        """Modules to list in modules-load.d: those that load (or are loaded) here."""
        return sorted({*self.load, *self.loaded})


def plan_modules(state: KernelParamsState, modules: list[str], required: list[str]) -> ModulePlan:
    """Sort wanted modules into load / already loaded / not applicable / missing required."""
    load, loaded, not_applicable, missing = [], [], {}, {}
    for name in (m.replace("-", "_") for m in modules):
        reason = _not_applicable_reason(state, name)
        if name in state.loaded_modules:
            loaded.append(name)
        elif reason is None:
            load.append(name)
        elif name in required:
            missing[name] = reason
        else:
            not_applicable[name] = reason
    return ModulePlan(load=load, loaded=loaded, not_applicable=not_applicable,
                      missing_required=missing)


def _not_applicable_reason(state: KernelParamsState, name: str) -> str | None:
    if name not in state.available_modules:
        return "not available for the running kernel (modinfo finds no such module)"
    if name in NEEDS_RDMA and not state.rdma_devices:
        return "not applicable: no RDMA stack/device (/sys/class/infiniband is empty)"
    return None


def module_plan_for_host(modules: list[str], required: list[str]) -> ModulePlan:
    """Read the live node and plan the modules."""
    state = node().kernel
    return plan_modules(state, modules, required)


@operation()
def kernel_modules(modules: list[str], required: list[str] | None = None):
    """
    Load kernel modules now (`modprobe`), skipping those not applicable on this node.

    + modules: module names (dashes or underscores)
    + required: modules whose absence fails the run instead of being reported
    """
    plan = module_plan_for_host(modules, required or [])
    if plan.missing_required:
        details = "; ".join(f"{m}: {why}" for m, why in plan.missing_required.items())
        raise OperationError(
            f"{host.name}: required module(s) cannot load: {details}. Install the driver/RDMA "
            "stack, or remove them from required_modules."
        )
    for name in plan.load:
        report_change(f"module {name}", "not loaded", "loaded", where="runtime; modprobe")
    if plan.load:
        yield every_command([argv_text("modprobe", m) for m in plan.load])
    else:
        skipped = "; ".join(f"{m} {why}" for m, why in plan.not_applicable.items())
        host.noop("modules loaded" + (f"; skipped: {skipped}" if skipped else ""))


@operation()
def modules_unloaded(modules: list[str], loaded_before: list[str]):
    """
    Unload the modules gpunode loaded (loaded now, not before its first apply): listed in
    /run/gpunode/unload for the run's lock holder, which unloads each once the run's
    connection is gone (tcp_bbr: that connection used it) and nothing else uses it.

    + modules: the modules gpunode loads (the profile's)
    + loaded_before: those loaded before gpunode's first apply (state.json)
    """
    live = node().kernel
    mine = sorted(m for m in {n.replace("-", "_") for n in modules}
                  if m in live.loaded_modules and m not in loaded_before)
    if not mine:
        host.noop("no module of gpunode's is loaded")
        return
    for name in mine:
        report_change(f"module {name}", "loaded", "unloaded",
                      where="once this run's connection closes; if still in use: at reboot")
    listing = argv_text("printf", "%s\\n", *mine)
    yield StringCommand(f"{listing} > {quote(UNLOAD_FILE)}")

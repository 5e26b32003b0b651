"""GPU runtime checks: persistence, power limits, kernel module flavour (profile vs live node).

Pure functions of a NodeProfile and a NodeSnapshot. A host without an NVIDIA driver gets
"not applicable" lines, never a failure.
"""

from __future__ import annotations

from gpunode.facts.nvidia import NvidiaGpu
from gpunode.facts.nvidia_modules import (
    OPEN_REQUIRED,
    Flavour,
    flavour_of_packages,
    flavour_packages,
    gpu_architectures,
    wanted_flavour,
)
from gpunode.facts.pcie import is_nvidia_gpu
from gpunode.ops.nvidia import power_limit_targets
from gpunode.profile.check import DEPLOY_FIX, Check, not_applicable, ok
from gpunode.profile.node import NodeProfile
from gpunode.roles.audit.gpu_checks import NOT_READ, smi_gpus
from gpunode.roles.audit.gpu_checks import _smi_missing as smi_missing
from gpunode.roles.audit.snapshot import NodeSnapshot

NO_DRIVER = "not applicable: no NVIDIA driver on this node"
PERSISTENCED = "nvidia-persistenced"


def driver_present(snap: NodeSnapshot) -> bool:
    return bool(smi_gpus(snap)) or snap.driver_loaded is not None


# --- persistence ------------------------------------------------------------------------------


def check_persistence(profile: NodeProfile, snap: NodeSnapshot) -> list[Check]:
    """nvidia-persistenced (when the profile wants it) and each GPU's persistence mode."""
    kind = "GPU persistence mode"
    if snap.nvidia is None:
        return [not_applicable(kind, NOT_READ, kind=kind)]
    if not driver_present(snap):
        return [not_applicable(kind, NO_DRIVER, kind=kind)]
    checks = []
    if profile.gpu_persistence and snap.persistenced is not None:
        checks.append(_daemon(snap))
    for gpu in smi_gpus(snap):
        checks.append(_mode(profile, gpu))
    return checks


def _daemon(snap: NodeSnapshot) -> Check:
    name = kind = PERSISTENCED
    unit = snap.persistenced
    assert unit is not None
    live = (f"{'installed' if unit.installed else 'not installed'}, "
            f"{unit.enabled or 'not enabled'}, {unit.active or 'not active'}")
    if unit.installed and unit.enabled == "enabled" and unit.active == "active":
        return ok(name, live, "installed, enabled, active", kind=kind)
    return Check(name=name, status="P0", live=live, want="installed, enabled, active", kind=kind,
                 fix=f"apt-get install {PERSISTENCED}; systemctl enable --now "
                 f"{PERSISTENCED} ({DEPLOY_FIX})", deploy_fixes=True,
                 note="without it the driver tears GPU state down when the last client exits")


def _mode(profile: NodeProfile, gpu: NvidiaGpu) -> Check:
    name, kind = f"GPU{gpu.index} persistence mode", "GPU persistence mode"
    if gpu.persistence_mode is None:
        return not_applicable(name, "not reported", kind=kind)
    if gpu.persistence_mode == "Enabled":
        return ok(name, "Enabled", kind=kind)
    note = ("without it the driver tears the GPU down between clients: slow first CUDA call "
            "in each container, power/clock settings lost")
    if profile.gpu_persistence:
        return Check(name=name, status="P0", live=gpu.persistence_mode, want="Enabled",
                     kind=kind, fix=f"nvidia-smi -pm 1 + {PERSISTENCED} ({DEPLOY_FIX})",
                     deploy_fixes=True, note=note)
    return Check(name=name, status="P2", live=gpu.persistence_mode, want="Enabled", kind=kind,
                 fix=f"systemctl enable --now {PERSISTENCED} (or nvidia-smi -pm 1 now); "
                 "gpu_persistence is off in the profile, so deploy/site.py leaves it",
                 note=note)


# --- power limits -----------------------------------------------------------------------------


def _power_live(gpu: NvidiaGpu) -> str:
    parts = [f"{gpu.power_limit_w:g} W"]
    if gpu.power_default_limit_w is not None:
        parts.append(f"default {gpu.power_default_limit_w:g} W")
    if gpu.power_min_limit_w is not None and gpu.power_max_limit_w is not None:
        parts.append(f"range {gpu.power_min_limit_w:g}..{gpu.power_max_limit_w:g} W")
    elif gpu.power_max_limit_w is not None:
        parts.append(f"max {gpu.power_max_limit_w:g} W")
    return parts[0] + (f" ({', '.join(parts[1:])})" if len(parts) > 1 else "")


def check_power_limits(profile: NodeProfile, snap: NodeSnapshot) -> list[Check]:
    """Each GPU's power limit against the profile (gpu_power_limit), else against its
    default: a limit below it is lost performance."""
    kind = "GPU power limit"
    gpus = smi_gpus(snap)
    if not gpus:
        if snap.nvidia is not None and not driver_present(snap):
            return [not_applicable(kind, NO_DRIVER, kind=kind)]
        return [smi_missing(snap, kind)]
    targets: dict[int, int] = {}
    problems: list[str] = []
    if profile.gpu_power_limit is not None:
        targets, problems = power_limit_targets(profile.gpu_power_limit, gpus)
    checks = [Check(name=kind, status="P1", live=p.removeprefix("gpu_power_limit: "),
                    want="a limit within the GPU's range", kind=kind,
                    fix="fix gpunode.gpu_power_limit in the profile") for p in problems]
    for gpu in gpus:
        checks.append(_power(gpu, targets.get(gpu.index), profile.gpu_power_limit is not None))
    return checks


def _power(gpu: NvidiaGpu, target: int | None, in_profile: bool) -> Check:
    name, kind = f"GPU{gpu.index} power limit", "GPU power limit"
    if gpu.power_limit_w is None:
        return not_applicable(name, "not reported (not supported on this GPU)", kind=kind)
    live = _power_live(gpu)
    if target is not None:
        if int(round(gpu.power_limit_w)) == target:
            return ok(name, live, f"{target} W", kind=kind)
        return Check(name=name, status="P0", live=live, want=f"{target} W", kind=kind,
                     fix=f"nvidia-smi -i {gpu.index} -pl {target} ({DEPLOY_FIX}; the boot unit "
                     "re-applies it)", deploy_fixes=True)
    if in_profile:
        return ok(name, live, kind=kind)
    default = gpu.power_default_limit_w if gpu.power_default_limit_w is not None \
        else gpu.power_max_limit_w
    if default is not None and gpu.power_limit_w < default:
        return Check(name=name, status="P0", live=live, want=f"{default:g} W", kind=kind,
                     fix=f"nvidia-smi -i {gpu.index} -pl {default:g} now; to keep it, set "
                     "gpunode.gpu_power_limit: default (deploy/site.py applies it at every "
                     "boot)")
    return ok(name, live, kind=kind)


# --- kernel module flavour --------------------------------------------------------------------


def node_flavour(snap: NodeSnapshot) -> tuple[str | None, str]:
    """(flavour, where it was read) of the module on the node: loaded, else installed."""
    if snap.driver_open is not None:
        return ("open" if snap.driver_open else "proprietary"), "loaded"
    if snap.module_installed_flavour:
        return snap.module_installed_flavour, "installed (modinfo)"
    packages = flavour_of_packages(snap.driver_packages)
    return (packages, "installed packages") if packages else (None, "")


def _flavour_change(profile: NodeProfile, archs: list[str], have: str, wanted: Flavour,
                    live: str, why: str) -> Check:
    """The other flavour is loaded and installed: which packages bring the wanted one."""
    packages = list(profile.nvidia_packages or flavour_packages(wanted, profile.nvidia_repository))
    must = bool(set(archs) & OPEN_REQUIRED) or profile.nvidia_kernel_modules != "auto"
    fix = f"install {' '.join(packages)} (" + (
        f"{DEPLOY_FIX} installs them" if profile.nvidia_driver_change
        else "nvidia_driver_change: true lets deploy/site.py do it") + "), then reboot"
    note = ("Blackwell GPUs do not initialise on the proprietary modules"
            if set(archs) & OPEN_REQUIRED and have == "proprietary" else why)
    name = kind = "NVIDIA kernel modules"
    return Check(name=name, status="P1" if must else "P2", live=live, want=wanted, kind=kind,
                 fix=fix, deploy_fixes=profile.nvidia_driver_change, note=note)


def check_module_flavour(profile: NodeProfile, snap: NodeSnapshot) -> list[Check]:
    """Open vs proprietary kernel modules against what the GPUs need (nvidia_kernel_modules)."""
    name = kind = "NVIDIA kernel modules"
    if snap.nvidia is None:
        return [not_applicable(name, NOT_READ, kind=kind)]
    devices = snap.gpus
    if not devices and not driver_present(snap):
        return [not_applicable(name, NO_DRIVER, kind=kind)]
    archs = gpu_architectures([g.architecture for g in smi_gpus(snap)],
                              [d.name for d in devices if is_nvidia_gpu(d)])
    wanted, why = wanted_flavour(profile.nvidia_kernel_modules, archs)
    have, where = node_flavour(snap)
    gpus = ", ".join(sorted(set(archs))) or "architecture unknown"
    if have is None:
        unread = ("flavour not read (no /proc/driver/nvidia/version, no modinfo)"
                  if driver_present(snap) else "no NVIDIA kernel module installed")
        return [not_applicable(name, f"{unread} ({gpus} GPUs)", kind=kind)]
    live = f"{have} ({where}); GPUs: {gpus}"
    if wanted is None:
        return [Check(name=name, status="P1", live=live, want="one flavour for every GPU",
                      kind=kind, fix=why)]
    pending = (snap.driver_open is not None and snap.module_installed_flavour is not None
               and snap.module_installed_flavour != have)
    if have == wanted and not pending:
        return [ok(name, live, wanted, kind=kind, note=why)]
    if have == wanted or (pending and snap.module_installed_flavour == wanted):
        return [Check(name=name, status="P1", live=f"{live}; installed: "
                      f"{snap.module_installed_flavour}", want=wanted, kind=kind,
                      fix="reboot to load the installed modules", pending="reboot")]
    return [_flavour_change(profile, archs, have, wanted, live, why)]

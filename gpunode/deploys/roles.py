"""One deploy per role, to run one part of the site deploy on its own:

    pyinfra INVENTORY gpunode.deploys.kernel_only --dry         # only the cmdline and kernel pin
    pyinfra INVENTORY gpunode.deploys.nvidia_driver_only --dry  # only the driver pin / flavour
    pyinfra INVENTORY gpunode.deploys.gpu_runtime_only --dry    # persistence, power limits
    pyinfra INVENTORY gpunode.deploys.verify_timer_only --dry   # the drift timer (on or off)

(``host_tuning_only`` and ``containers`` are deploys of their own modules.) Each is the site
deploy's part for that role, as site() runs it: the profile validated for every host first,
the node read in one command, a refusal before any change, the node's state recorded for undo
before the first change, then the role, then the read-back of the node (what else is open
is listed, never changed).
"""

from __future__ import annotations

from collections.abc import Callable

from pyinfra import host, state

from gpunode.facts.snapshot import Needs, lock_problems, read_node
from gpunode.ops.preflight import refuse_host
from gpunode.ops.state import state_problems
from gpunode.profile.loader import profiles_of_run
from gpunode.profile.node import NodeProfile
from gpunode.pyinfra_adapter import fit_cli_tables
from gpunode.roles import gpu_runtime as gpu_runtime_role
from gpunode.roles import kernel as kernel_role
from gpunode.roles import nvidia_driver as nvidia_driver_role
from gpunode.roles import verify_timer as verify_timer_role
from gpunode.roles.audit import verify
from gpunode.roles.gpu_runtime import PERSISTENCED_UNIT, gpu_runtime, gpu_runtime_problems
from gpunode.roles.host_tuning import BOOT_UNIT
from gpunode.roles.kernel import kernel_boot, kernel_pin_for_host, kernel_problems
from gpunode.roles.nvidia_driver import nvidia_driver
from gpunode.roles.undo import record_needs, record_state
from gpunode.roles.verify_timer import verify_timer


def _one_role(needs: Callable[[NodeProfile], Needs],
              problems: Callable[[NodeProfile], list[str]],
              apply: Callable[[NodeProfile], None]) -> None:
    """The site deploy's frame around one role."""
    fit_cli_tables()  # pyinfra's tables within 100 columns
    profile = profiles_of_run(state)[host.name]
    record = (sorted(profile.sysctls), profile.modules, BOOT_UNIT, [PERSISTENCED_UNIT])
    snapshot = read_node(Needs(lock=True) | record_needs(*record) | needs(profile)
                         | verify.needs(profile))
    if refuse_host([*lock_problems(snapshot), *state_problems(), *problems(profile)]):
        return
    record_state(*record)
    apply(profile)
    verify.verify_node(name="Verify the live node against the profile", profile=profile)


def _no_problems(_profile: NodeProfile) -> list[str]:
    return []


def kernel_only() -> None:
    """Kernel cmdline and kernel pin (reboot only with reboot: true), then verify."""
    _one_role(kernel_role.needs, kernel_problems, kernel_boot)


def nvidia_driver_only() -> None:
    """NVIDIA driver pin and module flavour (installs only with nvidia_driver_change: true)."""
    _one_role(nvidia_driver_role.needs, _no_problems, nvidia_driver)


def _gpu_runtime_problems(profile: NodeProfile) -> list[str]:
    gpu_runtime_problems(host.name, profile)  # raises before any change
    return []


def gpu_runtime_only() -> None:
    """GPU persistence mode and power limits (where an NVIDIA driver is loaded), then verify."""
    _one_role(gpu_runtime_role.needs, _gpu_runtime_problems, gpu_runtime)


def _verify_timer_needs(profile: NodeProfile) -> Needs:
    pin = kernel_role.needs(profile) if profile.verify_timer else Needs()
    return verify_timer_role.needs(profile) | pin


def _verify_timer(profile: NodeProfile) -> None:
    pin = kernel_pin_for_host(profile) if profile.verify_timer else None
    verify_timer(profile, kernel_pin=pin.version if pin else None)


def verify_timer_only() -> None:
    """gpunode-verify.timer (verify_timer: true), or its removal (false), then verify."""
    _one_role(_verify_timer_needs, kernel_problems, _verify_timer)

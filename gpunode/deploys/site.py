"""The site deploy: bring a GPU host to the inference profile, then read it back.

Every host's profile (host data ``gpunode`` or ``gpunode_profile_file``) is validated before any
host is touched. The node is read first, in one remote command, into the snapshot every role
plans from (gpunode.facts.snapshot: what each role's needs() names).
"""

from pyinfra import host, state

from gpunode.facts.snapshot import Needs, combined, lock_problems, read_node
from gpunode.ops.preflight import refuse_host
from gpunode.ops.state import state_problems
from gpunode.profile.loader import profiles_of_run
from gpunode.pyinfra_adapter import fit_cli_tables
from gpunode.roles import gpu_runtime as gpu_runtime_role
from gpunode.roles import host_tuning as host_tuning_role
from gpunode.roles import kernel as kernel_role
from gpunode.roles import nvidia_driver as nvidia_driver_role
from gpunode.roles import verify_timer as verify_timer_role
from gpunode.roles.audit import verify
from gpunode.roles.gpu_runtime import (
    PERSISTENCED_UNIT,
    gpu_runtime,
    gpu_runtime_problems,
)
from gpunode.roles.host_tuning import (
    BOOT_UNIT,
    host_tuning,
    host_tuning_problems,
)
from gpunode.roles.kernel import kernel_boot, kernel_pin_for_host, kernel_problems
from gpunode.roles.nvidia_driver import nvidia_driver
from gpunode.roles.undo import record_needs, record_state
from gpunode.roles.verify_timer import verify_timer


def site() -> None:
    """Host tuning, GPU runtime, NVIDIA driver pin and flavour, the verify timer (opt-in),
    kernel cmdline and pin (reboot if allowed), verify."""
    fit_cli_tables()  # pyinfra's tables within 100 columns
    profile = profiles_of_run(state)[host.name]
    record = (sorted(profile.sysctls), profile.modules, BOOT_UNIT, [PERSISTENCED_UNIT])
    snapshot = read_node(combined([
        Needs(lock=True), record_needs(*record), host_tuning_role.needs(profile),
                        gpu_runtime_role.needs(profile), nvidia_driver_role.needs(profile),
                        kernel_role.needs(profile), verify_timer_role.needs(profile),
                        verify.needs(profile)]))
    gpu_runtime_problems(host.name, profile)  # refuses before any change
    if refuse_host([*lock_problems(snapshot), *state_problems(), *host_tuning_problems(profile),
                    *kernel_problems(profile)]):
        return

    record_state(*record)
    host_tuning(profile)
    gpu_runtime(profile)
    nvidia_driver(profile)
    pin = kernel_pin_for_host(profile) if profile.verify_timer else None
    verify_timer(profile, kernel_pin=pin.version if pin else None)  # off: taken off if there
    kernel_boot(profile)
    verify.verify_node(name="Verify the live node against the profile", profile=profile)

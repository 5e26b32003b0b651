"""The site deploy: bring a GPU host to the inference profile, then read it back.

Every host's profile (host data ``gpunode`` or ``gpunode_profile_file``) is validated before any
host is touched. The live state every role reads is gathered first, in one remote command
(gpunode.facts.cache.prefetch).
"""

from pyinfra import host, state

from gpunode.facts.cache import prefetch
from gpunode.ops.lock import node_lock_problems
from gpunode.ops.preflight import refuse_host
from gpunode.ops.state import state_problems
from gpunode.profile.loader import profiles_of_run
from gpunode.pyinfra_adapter import fit_cli_tables
from gpunode.roles.audit.verify import verify_node, verify_prefetch
from gpunode.roles.gpu_runtime import (
    PERSISTENCED_UNIT,
    gpu_runtime,
    gpu_runtime_problems,
    gpu_runtime_reads,
)
from gpunode.roles.host_tuning import (
    BOOT_UNIT,
    host_tuning,
    host_tuning_problems,
    host_tuning_reads,
)
from gpunode.roles.kernel import kernel_boot, kernel_pin_for_host, kernel_problems, kernel_reads
from gpunode.roles.nvidia_driver import nvidia_driver, nvidia_driver_reads
from gpunode.roles.undo import record_reads, record_state
from gpunode.roles.verify_timer import verify_timer, verify_timer_reads


def site() -> None:
    """Host tuning, GPU runtime, NVIDIA driver pin and flavour, the verify timer (opt-in),
    kernel cmdline and pin (reboot if allowed), verify."""
    fit_cli_tables()  # pyinfra's tables within 100 columns
    profile = profiles_of_run(state)[host.name]
    record = (sorted(profile.sysctls), profile.modules, BOOT_UNIT, [PERSISTENCED_UNIT])
    prefetch([*record_reads(*record), *host_tuning_reads(profile), *gpu_runtime_reads(profile),
              *nvidia_driver_reads(profile), *kernel_reads(profile), *verify_prefetch(profile),
              *verify_timer_reads(profile)])
    gpu_runtime_problems(host.name, profile)  # refuses before any change
    if refuse_host([*node_lock_problems(), *state_problems(), *host_tuning_problems(profile),
                    *kernel_problems(profile)]):
        return

    record_state(*record)
    host_tuning(profile)
    gpu_runtime(profile)
    nvidia_driver(profile)
    pin = kernel_pin_for_host(profile) if profile.verify_timer else None
    verify_timer(profile, kernel_pin=pin.version if pin else None)  # off: taken off if there
    kernel_boot(profile)
    verify_node(name="Verify the live node against the profile", profile=profile)

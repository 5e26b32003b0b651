"""The host-tuning deploy: runtime settings and their persistence only (no kernel cmdline, no
driver, no reboot), then the read-back."""

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
from gpunode.roles.undo import record_reads, record_state


def host_tuning_only() -> None:
    """sysctls, modules, MaxReadReq, ACS, C-states, governor, memlock, GPU persistence and
    power limits; then verify."""
    fit_cli_tables()  # pyinfra's tables within 100 columns
    profile = profiles_of_run(state)[host.name]
    record = (sorted(profile.sysctls), profile.modules, BOOT_UNIT, [PERSISTENCED_UNIT])
    prefetch([*record_reads(*record), *host_tuning_reads(profile), *gpu_runtime_reads(profile),
              *verify_prefetch(profile)])
    gpu_runtime_problems(host.name, profile)  # refuses before any change
    if refuse_host([*node_lock_problems(), *state_problems(), *host_tuning_problems(profile)]):
        return

    record_state(*record)
    host_tuning(profile)
    gpu_runtime(profile)
    verify_node(name="Verify the live node against the profile", profile=profile)

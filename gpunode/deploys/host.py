"""The host-tuning deploy: runtime settings and their persistence only (no kernel cmdline, no
driver, no reboot), then the read-back."""

from pyinfra import host, state

from gpunode.facts.snapshot import Needs, combined, lock_problems, read_node
from gpunode.ops.preflight import refuse_host
from gpunode.ops.state import state_problems
from gpunode.profile.loader import profiles_of_run
from gpunode.pyinfra_adapter import fit_cli_tables
from gpunode.roles import gpu_runtime as gpu_runtime_role
from gpunode.roles import host_tuning as host_tuning_role
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
from gpunode.roles.undo import record_needs, record_state


def host_tuning_only() -> None:
    """sysctls, modules, MaxReadReq, ACS, C-states, governor, memlock, GPU persistence and
    power limits; then verify."""
    fit_cli_tables()  # pyinfra's tables within 100 columns
    profile = profiles_of_run(state)[host.name]
    record = (sorted(profile.sysctls), profile.modules, BOOT_UNIT, [PERSISTENCED_UNIT])
    snapshot = read_node(combined([
        Needs(lock=True), record_needs(*record), host_tuning_role.needs(profile),
                        gpu_runtime_role.needs(profile), verify.needs(profile)]))
    gpu_runtime_problems(host.name, profile)  # refuses before any change
    if refuse_host([*lock_problems(snapshot), *state_problems(), *host_tuning_problems(profile)]):
        return

    record_state(*record)
    host_tuning(profile)
    gpu_runtime(profile)
    verify.verify_node(name="Verify the live node against the profile", profile=profile)

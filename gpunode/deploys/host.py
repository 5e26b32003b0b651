"""The host-tuning deploy: runtime settings and their persistence only (no kernel cmdline, no
driver, no reboot), then the read-back."""

from pyinfra import host, state

from gpunode.roles.audit.snapshot import snapshot_reads
from gpunode.roles.audit.verify import verify_node
from gpunode.roles.facts.cache import prefetch
from gpunode.roles.host_tuning import host_tuning, host_tuning_reads
from gpunode.roles.profile.loader import validate_hosts


def host_tuning_only() -> None:
    """sysctls, modules, MaxReadReq, C-states, governor, memlock; then verify."""
    profile = validate_hosts(state.inventory)[host.name]
    prefetch([*host_tuning_reads(profile), *snapshot_reads(profile).values()])  # + the verify's

    host_tuning(profile)
    verify_node(name="Verify the live node against the profile", profile=profile)

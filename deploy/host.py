"""gpunode host tuning only (no kernel cmdline, no reboot): runtime settings + persistence."""

from pyinfra import host, state

from roles.audit.snapshot import snapshot_reads
from roles.audit.verify import verify_node
from roles.facts.cache import prefetch
from roles.host_tuning import host_tuning, host_tuning_reads
from roles.profile.loader import validate_hosts

profile = validate_hosts(state.inventory)[host.name]
prefetch([*host_tuning_reads(profile), *snapshot_reads(profile).values()])  # + the verify's

host_tuning(profile)
verify_node(name="Verify the live node against the profile", profile=profile)

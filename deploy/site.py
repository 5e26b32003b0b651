"""gpunode: bring a GPU host to the inference profile, then read it back.

    pyinfra inventories/example.py deploy/site.py --dry     # the plan, changes nothing
    pyinfra inventories/example.py deploy/site.py           # apply, verify

Every host's profile is validated before any host is touched. The live state every role
reads is gathered first, in one remote command (roles.facts.cache.prefetch).
"""

from pyinfra import host, state

from roles.audit.verify import verify_node
from roles.facts.cache import prefetch
from roles.host_tuning import host_tuning, host_tuning_reads
from roles.kernel import kernel_boot, kernel_reads
from roles.nvidia_driver import nvidia_driver, nvidia_driver_reads
from roles.profile.loader import validate_hosts

profile = validate_hosts(state.inventory)[host.name]
prefetch([*host_tuning_reads(profile), *nvidia_driver_reads(profile), *kernel_reads(profile)])

host_tuning(profile)
nvidia_driver(profile)
kernel_boot(profile)
verify_node(name="Verify the live node against the profile", profile=profile)

"""gpunode: bring a GPU host to the inference profile, then read it back.

    pyinfra inventories/example.py deploy/site.py --dry     # the plan, changes nothing
    pyinfra inventories/example.py deploy/site.py           # apply, verify

Every host's profile is validated before any host is touched.
"""

from pyinfra import host, state

from roles.audit.verify import verify_node
from roles.host_tuning import host_tuning
from roles.kernel import kernel_boot
from roles.nvidia_driver import nvidia_driver
from roles.profile.loader import validate_hosts

profile = validate_hosts(state.inventory)[host.name]

host_tuning(profile)
nvidia_driver(profile)
kernel_boot(profile)
verify_node(name="Verify the live node against the profile", profile=profile)

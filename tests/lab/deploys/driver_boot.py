"""Lab deploy: only gpu_runtime's driver-boot half (gpunode-nvidia-nodes.service and the
modprobe.d file of nvidia_module_options), which site.py installs only where an NVIDIA driver
is present (the lab guest has none)."""

from pyinfra import host, state

from gpunode.facts.snapshot import Needs, read_node
from gpunode.profile.loader import profiles_of_run
from gpunode.roles.gpu_runtime.driver_boot import (
    device_nodes_at_boot,
    driver_boot_needs,
    module_options,
)

profile = profiles_of_run(state)[host.name]
read_node(driver_boot_needs(profile) | Needs(nvidia=True))
module_options(profile)
device_nodes_at_boot()

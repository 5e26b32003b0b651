"""Lab deploy: only the kernel role (cmdline, pin, the reboot and its NVIDIA check)."""

from pyinfra import host, state

from gpunode.facts.snapshot import read_node
from gpunode.profile.loader import profiles_of_run
from gpunode.roles import kernel as kernel_role
from gpunode.roles.kernel import kernel_boot

profile = profiles_of_run(state)[host.name]
read_node(kernel_role.needs(profile))
kernel_boot(profile)

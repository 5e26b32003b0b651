"""pyinfra INVENTORY deploy/containers.py: Proxmox LXC GPU containers and the driver inside them.

The deploy itself is gpunode.deploys.containers; this file is what pyinfra runs from a clone.
"""

from gpunode.deploys import containers

containers()

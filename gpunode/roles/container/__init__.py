"""container role: the NVIDIA userspace driver inside a Proxmox GPU container.

The container is its own pyinfra host, reached with ``@pct/PROXMOX_HOST:VMID`` (commands
through ``pct exec`` on the host, no SSH server needed in the container) or over SSH.

What it changes and why:

- /etc/apt/preferences.d/90-gpunode-nvidia.pref: the NVIDIA packages pinned to the host's
  driver version (the same template as the host's nvidia_driver role), so apt's candidate
  for every NVIDIA library, dependencies included, is that version;
- the userspace packages at exactly that version, ``--no-install-recommends`` (no DKMS
  kernel module: the container uses the host's module, and can't load one), then held.
  Why apt and not NVIDIA's ``.run --no-kernel-module``: dpkg then knows what is installed,
  so a re-run compares versions and changes nothing, apt says beforehand which versions it
  can install (a mismatch is refused before anything is installed), and an unrelated
  ``apt upgrade`` can't silently replace .run files with other versions;
- nothing else: then it reads back that nvidia-smi lists the GPUs passed in, that
  ``ulimit -l`` is unlimited and that the libraries equal the host's module, and reports
  it like the host's verify step (``verify_container``).
"""

from __future__ import annotations

from gpunode.facts.snapshot import read_node
from gpunode.ops.apt import apt_hold
from gpunode.ops.nvidia_pin import nvidia_pin
from gpunode.pyinfra_adapter import deploy
from gpunode.roles.container.defaults import ContainerSettings
from gpunode.roles.container.ops import needs, nvidia_userspace, verify_container

__all__ = ["container_driver", "needs"]


@deploy("gpunode: container")
def container_driver(
    host_driver_version: str,
    settings: ContainerSettings | None = None,
    expected_gpus: int | None = None,
    container: str = "",
) -> None:
    """Install the host's exact NVIDIA userspace driver, hold it, then verify the container.

    ``expected_gpus`` (else ``settings.gpus``, else the /dev/nvidiaN nodes present) is what
    nvidia-smi must list; ``container`` names it in messages (default: the pyinfra host).
    """
    settings = settings or ContainerSettings()
    packages = list(settings.nvidia_packages)
    read_node(needs(packages))
    nvidia_pin(host_driver_version)
    nvidia_userspace(
        name=f"Install NVIDIA userspace {host_driver_version} (no kernel module)",
        version=host_driver_version,
        packages=packages,
        container=container,
    )
    apt_hold(name=f"Hold NVIDIA userspace {host_driver_version}", packages=packages)
    verify_container(
        name="Verify the container: GPUs, memlock, driver",
        expected_gpus=settings.gpus if expected_gpus is None else expected_gpus,
        host_driver_version=host_driver_version,
        packages=packages,
    )

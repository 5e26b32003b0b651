"""lxc_gpu role: Proxmox LXC containers with NVIDIA GPUs, on the Proxmox host.

What it changes and why:

- creates a declared container with ``pct create`` when it doesn't exist, else
  converges its options with ``pct set`` (``gpunode.profile.container``);
- gives it the GPUs through raw ``lxc.*`` lines in /etc/pve/lxc/VMID.conf, computed
  from the host's /proc/devices and /dev/nvidia* (``passthrough``): Proxmox's API
  can't set raw lxc keys, so the file is edited, keeping every line it doesn't own,
  the description comments and the [snapshot]/[pve:pending] sections (``pve_config``);
- restarts a running container to apply such changes only when the spec allows it,
  otherwise reports "pending restart" (``plan``); "pending" is read from the live node
  (/var/lib/lxc/VMID/config, written by ``pct start``), so it holds until the restart.

Entry point: ``lxc_gpu(specs)`` (``@deploy``), after ``validate.validate_container_hosts``
checked every host's declared containers (host data ``gpunode_containers``) against its
facts; deploy/containers.py does both. The operations are in ``ops``; the knobs
and their defaults in ``defaults``.

Undo: ``lxc_gpu_undo()`` takes out of each container's config exactly the lines gpunode added
(the record ``record`` keeps with each write; ``undo``).

The ``@pct/HOST:VMID`` connector (``connector``) then runs operations inside the
container through ``pct exec`` (the ``container`` role).
"""

from __future__ import annotations

from gpunode.facts.lxc import PctList, PveLxcConfigText
from gpunode.facts.snapshot import Needs, Part, read_node
from gpunode.profile.container import ContainerSpec
from gpunode.pyinfra_adapter import deploy
from gpunode.roles.lxc_gpu.ops import (
    container_config_lines,
    container_created,
    container_options,
    container_restarted,
    needs,
)
from gpunode.roles.lxc_gpu.record import record_needs, recorded_vmids
from gpunode.roles.lxc_gpu.undo import container_gpu_lines_removed

__all__ = ["lxc_gpu", "lxc_gpu_undo", "needs"]


def undo_needs(vmids: list[int]) -> Needs:
    """What taking the recorded containers' lines out reads."""
    return record_needs() | Needs(parts=(
        Part(name="pct_list", fact=PctList),
        *(Part(name=f"config:{vmid}", fact=PveLxcConfigText, kwargs=(("vmid", vmid),))
          for vmid in vmids)))


@deploy("gpunode: containers")
def lxc_gpu(containers: list[ContainerSpec]) -> None:
    """Create or converge each container, in declaration order (see the module docstring).

    Validate the specs first (``gpunode.roles.lxc_gpu.validate``): this function trusts them.
    """
    read_node(needs(containers))
    for spec in containers:
        label = f"container {spec.vmid} ({spec.hostname})"
        container_created(name=f"Create {label}{spec.hook_note}", spec=spec)
        container_config_lines(
            name=f"GPU lines in /etc/pve/lxc/{spec.vmid}.conf{spec.hook_note}",
            spec=spec,
        )
        container_options(name=f"Options of {label}", spec=spec)
        container_restarted(
            name=f"Restart {label} if needed" + ("" if spec.restart_allowed else " (report only)"),
            spec=spec,
        )


@deploy("gpunode: undo GPU containers")
def lxc_gpu_undo() -> None:
    """Take gpunode's lines out of each container it recorded on this host (``undo``)."""
    read_node(record_needs())
    vmids = recorded_vmids()
    read_node(undo_needs(vmids))  # the recorded containers' configs (a second read, if any)
    for vmid in vmids:
        container_gpu_lines_removed(name=f"Remove the lines gpunode added to container {vmid}",
                                    vmid=vmid)

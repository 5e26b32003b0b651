"""gpunode: Proxmox LXC containers with NVIDIA GPUs, and the driver inside them.

    pyinfra inventories/example_containers.py deploy/containers.py --limit pve_hosts --dry
    pyinfra inventories/example_containers.py deploy/containers.py --limit pve_hosts
    pyinfra inventories/example_containers.py deploy/containers.py --limit gpu_containers

- A Proxmox host with ``gpunode_containers`` (a list of ContainerSpec mappings) gets the
  lxc_gpu role: create / converge each container, its GPU lines, restart only if allowed.
- A container host (``@pct/PVE:VMID``, or any host with ``gpunode_container``) gets the
  container role: the NVIDIA userspace at the host's exact driver version, then checks.

Before any operation is added, every Proxmox host's containers are validated against its
facts, and every container host's settings: one error lists all problems of all hosts.
Run the Proxmox hosts first: a container must exist and run before @pct can reach it, and a
restart must not race the driver install inside it. ``containers_undo`` takes the GPU lines
gpunode added back out (deploy/undo.py runs it before the host's undo).
"""

from pyinfra import host, state

from gpunode.facts.snapshot import Needs, lock_problems, read_node
from gpunode.ops.preflight import refuse_host
from gpunode.pyinfra_adapter import fit_cli_tables
from gpunode.roles.container import container_driver
from gpunode.roles.container import needs as container_needs
from gpunode.roles.container.defaults import ContainerSettings
from gpunode.roles.container.inventory import declared_specs, validate_container_targets
from gpunode.roles.lxc_gpu import lxc_gpu, lxc_gpu_undo
from gpunode.roles.lxc_gpu import needs as lxc_gpu_needs
from gpunode.roles.lxc_gpu.validate import ContainerDeployError, validate_container_hosts

_CACHE = "_gpunode_containers"


def containers() -> None:
    """lxc_gpu on Proxmox hosts with gpunode_containers; the container role on container hosts."""
    fit_cli_tables()  # pyinfra's tables within 100 columns

    # The deploy file runs once per host: validate all hosts once per run, keep it on the state.
    validated = getattr(state, _CACHE, None)
    if validated is None:
        active = [h for h in state.inventory if h in state.active_hosts]
        specs = validate_container_hosts(active)
        targets = validate_container_targets(active, declared_specs(state.inventory))
        validated = (specs, targets)
        setattr(state, _CACHE, validated)
    specs, targets = validated

    if host.name in specs:
        snapshot = read_node(lxc_gpu_needs(specs[host.name]) | Needs(lock=True))
        if refuse_host(lock_problems(snapshot)):
            return
        lxc_gpu(specs[host.name])

    if host.name in targets:
        target = targets[host.name]
        packages = list((target.settings or ContainerSettings()).nvidia_packages)
        snapshot = read_node(container_needs(packages) | Needs(lock=True, nvidia=True))
        if refuse_host(lock_problems(snapshot)):
            return
        # /proc/driver/nvidia/version is the host's module, seen from inside the container.
        driver = target.declared_driver or snapshot.driver_loaded
        if driver is None:
            raise ContainerDeployError(
                f"{host.name}: can't tell the Proxmox host's NVIDIA driver version: "
                "/proc/driver/nvidia/version is empty in the container (is the module loaded on "
                "the host?). Set gpunode_container: {nvidia_driver: VERSION} in its data."
            )
        container_driver(
            host_driver_version=driver,
            settings=target.settings,
            expected_gpus=target.expected_gpus,
            container=target.label,
        )


def containers_undo() -> None:
    """Take out of each container's config on this Proxmox host exactly the lines gpunode
    added (its record under /var/lib/gpunode/lxc), keeping the old file; the user's lines,
    devN keys, [pve:pending] and snapshot sections stay. deploy/undo.py runs it first."""
    fit_cli_tables()  # pyinfra's tables within 100 columns
    lxc_gpu_undo()

"""The raw lxc.* lines that give a Proxmox LXC container its GPUs, computed from the host's
device nodes and majors (gpunode.facts.nvidia_devices)."""

from __future__ import annotations

from collections.abc import Sequence

from gpunode.facts.nvidia_devices import (
    NVIDIACTL_MINOR,
    DeviceNode,
    PassthroughError,
    gpu_indices_on_host,
    nvidia_majors,
)


def _mount(path: str, create: str = "file") -> tuple[str, str]:
    return ("lxc.mount.entry", f"{path} {path.lstrip('/')} none bind,optional,create={create}")


def _allow(major: int, minor: int | str = "*") -> tuple[str, str]:
    return ("lxc.cgroup2.devices.allow", f"c {major}:{minor} rwm")


def gpu_passthrough_lines(
    devices: Sequence[DeviceNode],
    majors: dict[str, int],
    gpu_indices: list[int] | None,
    memlock: str | int | None = "unlimited",
) -> list[tuple[str, str]]:
    """The raw lxc.* lines that give a container the selected GPUs.

    ``gpu_indices`` None means every /dev/nvidiaN on the host. Lines, in order:

    - ``lxc.cgroup2.devices.allow``: ``c 195:* rwm`` when the container gets every
      GPU; for a subset, one ``c 195:N rwm`` per GPU plus ``c 195:255 rwm``
      (nvidiactl), as nvidia-container-toolkit does, so a privileged container
      can't mknod its way to the other GPUs. Then ``c UVM:* rwm`` and, when the
      driver has MIG capability nodes, ``c CAPS:* rwm``.
    - ``lxc.mount.entry`` for each selected /dev/nvidiaN, then /dev/nvidiactl,
      /dev/nvidia-uvm, /dev/nvidia-uvm-tools (``create=file``) and /dev/nvidia-caps
      (``create=dir``). These four are always listed; ``optional`` lets the
      container start while a node is still missing on the host.
    - ``lxc.prlimit.memlock`` (``unlimited`` or a byte count) unless ``memlock`` is None:
      pinned memory for CUDA can't be raised from inside the container.
    """
    nv = nvidia_majors(majors)
    if nv.uvm is None:
        raise PassthroughError(
            "the nvidia-uvm module is not loaded on the Proxmox host, so its device major "
            "(dynamic, read from /proc/devices) is unknown and CUDA would fail in the "
            "container. Load it now and at every boot: `modprobe nvidia-uvm` plus "
            "'nvidia-uvm' in /etc/modules-load.d/, or run `nvidia-modprobe -u -c=0`."
        )
    on_host = gpu_indices_on_host(devices)
    if not on_host:
        raise PassthroughError(
            "no /dev/nvidiaN device node exists on the Proxmox host (the driver creates "
            "them on first use): run `nvidia-smi` or `nvidia-modprobe -c=0` once, then "
            "run again."
        )
    if gpu_indices is None:
        selected = on_host
    else:
        missing = sorted(set(gpu_indices) - set(on_host))
        if missing:
            raise PassthroughError(
                f"GPU index {missing[0]} requested but /dev/nvidia{missing[0]} does not exist "
                f"on the host; it has {', '.join(f'/dev/nvidia{i}' for i in on_host)}. "
                f"Use indices from {on_host} or 'all'."
            )
        selected = sorted(set(gpu_indices))

    lines: list[tuple[str, str]] = []
    if selected == on_host:
        lines.append(_allow(nv.frontend))
    else:
        lines.extend(_allow(nv.frontend, i) for i in selected)
        lines.append(_allow(nv.frontend, NVIDIACTL_MINOR))
    lines.append(_allow(nv.uvm))
    if nv.caps is not None:
        lines.append(_allow(nv.caps))
    lines.extend(_mount(f"/dev/nvidia{i}") for i in selected)
    lines.append(_mount("/dev/nvidiactl"))
    lines.append(_mount("/dev/nvidia-uvm"))
    lines.append(_mount("/dev/nvidia-uvm-tools"))
    lines.append(_mount("/dev/nvidia-caps", create="dir"))
    if memlock is not None:
        lines.append(("lxc.prlimit.memlock", str(memlock)))
    return lines

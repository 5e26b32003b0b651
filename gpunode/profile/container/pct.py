"""pct command lines: a ContainerSpec against the container's current /etc/pve/lxc/VMID.conf
options, as the exact ``pct create`` / ``pct set`` / ``pct resize`` argv, and the differences
Proxmox can't converge."""

from __future__ import annotations

import re

from gpunode.profile.container.spec import ContainerSpec
from gpunode.profile.container.values import format_property_string, parse_property_string

# Keys Proxmox fills in itself; absent from the spec they are not a difference.
_NET_FILLED_BY_PROXMOX = frozenset({"hwaddr", "type"})


def _bool(value: bool) -> str:
    return "1" if value else "0"


def pct_create_args(spec: ContainerSpec) -> list[str]:
    """argv of the ``pct create`` that makes the container (stopped; gpunode starts it
    after writing the GPU lines)."""
    return [
        "pct",
        "create",
        str(spec.vmid),
        spec.ostemplate,
        "--hostname",
        spec.hostname,
        "--cores",
        str(spec.cores),
        "--memory",
        str(spec.memory),
        "--swap",
        str(spec.swap),
        "--rootfs",
        f"{spec.rootfs_storage}:{spec.rootfs_size_gb}",
        "--net0",
        spec.net0,
        "--unprivileged",
        _bool(spec.unprivileged),
        "--features",
        spec.features,
        "--onboot",
        _bool(spec.onboot),
        "--start",
        "0",
    ]


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "yes", "on", "true")


def _props_equal(desired: dict[str, str], current: dict[str, str], ignore: frozenset) -> bool:
    def norm(props: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in props.items() if k not in ignore or k in desired}

    return norm(desired) == norm(current)


def _features_equal(desired: str, current: str | None) -> bool:
    def norm(value: str | None) -> dict[str, str]:
        props = parse_property_string(value or "")
        out = {}
        for key, val in props.items():
            if key == "mount":
                out[key] = ";".join(sorted(v for v in val.split(";") if v))
            else:
                out[key] = "1" if _truthy(val) else "0"
        return {k: v for k, v in out.items() if v not in ("0", "")}

    return norm(desired) == norm(current)


def _desired_net0(spec: ContainerSpec, current: str | None) -> str | None:
    """The net0 to set, or None when the current one already matches."""
    desired = parse_property_string(spec.net0)
    now = parse_property_string(current or "")
    if current is not None and _props_equal(desired, now, _NET_FILLED_BY_PROXMOX):
        return None
    if "hwaddr" not in desired and "hwaddr" in now:
        # Keep the MAC address: a new one means a new DHCP lease and a new IPv6 address.
        desired = {**desired, "hwaddr": now["hwaddr"]}
    return format_property_string(desired)


def pct_set_args(spec: ContainerSpec, current: dict[str, str]) -> list[str]:
    """argv of the ``pct set`` that converges the options that differ, or [].

    ``current`` is the main section of /etc/pve/lxc/VMID.conf (see
    ``gpunode.facts.pve_config.main_options``). Compared: hostname, cores, memory,
    swap, net0 (ignoring the hwaddr/type Proxmox adds, keeping the MAC), features,
    onboot. On a running container Proxmox applies hostname, cores and onboot at
    once, memory/swap live when it can, and parks the rest in [pve:pending].
    """
    options: list[str] = []

    def differs(key: str, want: str) -> None:
        if current.get(key) != want:
            options.extend([f"--{key}", want])

    differs("hostname", spec.hostname)
    differs("cores", str(spec.cores))
    differs("memory", str(spec.memory))
    # Proxmox's default swap is 512 when the key is absent.
    if current.get("swap", "512") != str(spec.swap):
        options.extend(["--swap", str(spec.swap)])
    net0 = _desired_net0(spec, current.get("net0"))
    if net0 is not None:
        options.extend(["--net0", net0])
    if not _features_equal(spec.features, current.get("features")):
        options.extend(["--features", spec.features])
    if _truthy(current.get("onboot")) != spec.onboot:
        options.extend(["--onboot", _bool(spec.onboot)])
    if not options:
        return []
    return ["pct", "set", str(spec.vmid), *options]


_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]?)$")
_SIZE_UNITS = {"": 1 / (1024**3), "K": 1 / (1024**2), "M": 1 / 1024, "G": 1, "T": 1024}


def rootfs_size_gb(rootfs: str | None) -> float | None:
    """The size=... of a rootfs value in GiB (``local-lvm:vm-110-disk-0,size=64G``)."""
    size = parse_property_string(rootfs or "").get("size")
    match = _SIZE_RE.match(size or "")
    if not match:
        return None
    return float(match.group(1)) * _SIZE_UNITS[match.group(2)]


def pct_resize_args(spec: ContainerSpec, current: dict[str, str]) -> list[str]:
    """argv of ``pct resize VMID rootfs NG`` when the disk must grow, else [].
    A smaller declared size is reported by :func:`immutable_mismatches`."""
    size = rootfs_size_gb(current.get("rootfs"))
    if size is None or spec.rootfs_size_gb <= size:
        return []
    return ["pct", "resize", str(spec.vmid), "rootfs", f"{spec.rootfs_size_gb}G"]


def immutable_mismatches(spec: ContainerSpec, current: dict[str, str]) -> list[str]:
    """Differences gpunode can't converge on an existing container, as messages."""
    problems = []
    is_unprivileged = _truthy(current.get("unprivileged"))
    if is_unprivileged != spec.unprivileged:
        problems.append(
            f"container {spec.vmid}: unprivileged is {_bool(is_unprivileged)} but the spec "
            f"says {_bool(spec.unprivileged)}; Proxmox can't change it after creation "
            "(back up and restore with --unprivileged, or change the spec)"
        )
    size = rootfs_size_gb(current.get("rootfs"))
    if size is not None and spec.rootfs_size_gb < size:
        problems.append(
            f"container {spec.vmid}: rootfs is {size:g} GiB, the spec says "
            f"{spec.rootfs_size_gb} GiB; a container disk can't shrink (raise "
            "rootfs_size_gb to at least the current size)"
        )
    return problems

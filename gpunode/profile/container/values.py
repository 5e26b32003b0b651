"""The values inside a container's settings: Proxmox property strings (net0, features) and
the checks of each of their values, NVIDIA driver versions, Debian package names."""

from __future__ import annotations

import re
from collections.abc import Callable

from gpunode.profile.allowed import (
    ASCII_INTEGER,
    CONTROL,
    DRIVER_VERSION,
    FS_TYPES,
    IFACE_NAME,
    MAC_ADDRESS,
    PACKAGE_NAME,
    VLAN_TRUNKS,
    check,
    check_ip,
    shown,
)


def checked_driver_version(value: str | None) -> str | None:
    """A pydantic check of an NVIDIA driver version ('550.127.05'); None passes."""
    if value is not None and not (isinstance(value, str) and DRIVER_VERSION.fullmatch(value)):
        raise ValueError(f"{shown(value)}: must be a driver version such as '550.127.05'")
    return value


def checked_package_names(value: list[str]) -> list[str]:
    """A pydantic check of Debian package names (policy 5.6.1, optional ':arch')."""
    for i, name in enumerate(value):
        if not PACKAGE_NAME.fullmatch(name):
            raise ValueError(
                f"item {i}: {shown(name)} is not a Debian package name such as 'libcuda1' "
                "(lowercase letters, digits, + - .)"
            )
    return value


def _flag(value: str) -> str:
    if value not in ("0", "1"):
        raise ValueError(f"{shown(value)} is not 0 or 1")
    return value


def _int_in(low: int, high: int) -> Callable[[str], str]:
    def checked(value: str) -> str:
        if not ASCII_INTEGER.fullmatch(value) or not low <= int(value) <= high:
            raise ValueError(f"{shown(value)} is not an integer from {low} to {high}")
        return value

    return checked


def _one_of(*words: str) -> Callable[[str], str]:
    def checked(value: str) -> str:
        if value not in words:
            raise ValueError(f"{shown(value)} is not one of {', '.join(words)}")
        return value

    return checked


def _ip(version: int, cidr: bool, words: tuple[str, ...] = ()) -> Callable[[str], str]:
    what = f"an IPv{version} address" + ("/prefix" if cidr else "")
    if words:
        what += f" or {', '.join(words)}"

    def checked(value: str) -> str:
        return value if value in words else check_ip(value, version, what, cidr)

    return checked


def _pattern(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    return lambda value: check(pattern, value, what)


# net0 values as PVE::LXC::Config $netconf_desc allows them.
NET_VALUES: dict[str, Callable[[str], str]] = {
    "name": _pattern(IFACE_NAME, "an interface name (up to 15 letters, digits, _ . -)"),
    "bridge": _pattern(IFACE_NAME, "a bridge name such as 'vmbr0'"),
    "hwaddr": _pattern(MAC_ADDRESS, "a MAC address such as 'BC:24:11:00:00:01'"),
    "mtu": _int_in(64, 65535),
    "ip": _ip(4, True, ("dhcp", "manual")),
    "gw": _ip(4, False),
    "ip6": _ip(6, True, ("auto", "dhcp", "manual")),
    "gw6": _ip(6, False),
    "firewall": _flag,
    "tag": _int_in(1, 4094),
    "trunks": _pattern(VLAN_TRUNKS, "VLAN ids such as '10;20-30'"),
    "rate": _pattern(re.compile(r"[0-9]{1,6}(?:\.[0-9]{1,3})?"), "a rate in MB/s such as '125'"),
    "type": _one_of("veth"),
    "link_down": _flag,
}
FEATURE_VALUES: dict[str, Callable[[str], str]] = {
    "mount": _pattern(FS_TYPES, "file system types separated by ';' such as 'nfs;cifs'"),
    "nesting": _flag,
    "keyctl": _flag,
    "fuse": _flag,
    "mknod": _flag,
    "force_rw_sys": _flag,
}


def checked_properties(
    value: str, checks: dict[str, Callable[[str], str]], field: str
) -> dict[str, str]:
    """A property string whose every key is known and every value passes its check."""
    if CONTROL.search(value) or len(value) > 512:
        raise ValueError("must be one line of at most 512 characters")
    props = parse_property_string(value)
    unknown = sorted(set(props) - set(checks))
    if unknown:
        raise ValueError(
            f"unknown {field} key {shown(unknown[0])}; allowed: {', '.join(sorted(checks))}"
        )
    for key, item in props.items():
        try:
            checks[key](item)
        except ValueError as exc:
            raise ValueError(f"{field} {key}={exc}") from None
    return props


def parse_property_string(value: str) -> dict[str, str]:
    """Parse a Proxmox property string (``name=eth0,bridge=vmbr0,ip=dhcp``)."""
    result: dict[str, str] = {}
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, val = part.partition("=")
        result[key.strip()] = val.strip() if sep else ""
    return result


def format_property_string(props: dict[str, str]) -> str:
    """The property string of props, in their order (parse_property_string's inverse)."""
    return ",".join(f"{k}={v}" for k, v in props.items())

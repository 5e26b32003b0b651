"""Kernel package parsing and version ordering on real dpkg listings (tests/data/kernels)."""

import pytest

from gpunode.facts.kernels import (
    KERNELS_MARKER_DPKG,
    KERNELS_MARKER_HOLD,
    KERNELS_MARKER_UNAME,
    kernel_version_from_package,
    kernel_version_key,
    parse_installed_kernels,
    parse_kernel_packages,
)

from ._data import read


def test_pve7_host_with_rc_meta_and_edge_packages():
    kernels = parse_kernel_packages("", read("kernels/dpkg_l_pve7_pve_kernels.txt"), "")
    assert kernels.installed == [
        "6.1.0-1-pve",
        "6.0.15-edge",
        "5.15.74-1-pve",
        "5.15.64-1-pve",
        "5.15.53-1-pve",
        "5.15.39-2-pve",
        "5.15.35-1-pve",
        "5.15.19-2-pve",
        "5.13.19-6-pve",
        "5.11.22-7-pve",
        "5.10.6-1-pve",
    ]
    assert kernels.newest == "6.1.0-1-pve"
    # "rc" (removed, config left) packages do not count
    assert "5.13.19-4-pve" not in kernels.installed
    assert "5.4.106-1-pve" not in kernels.installed
    # meta packages and helpers map to no kernel
    assert "pve-kernel-5.15" not in kernels.packages
    assert "pve-kernel-helper" not in kernels.packages
    assert kernels.packages["pve-kernel-6.0.15-edge"] == "6.0.15-edge"


def test_pve7_running_older_kernel_means_reboot_pending():
    uname = read("kernels/uname_a_pve7_duo.txt").split()[2]  # `uname -a` field 3 = `uname -r`
    assert uname == "5.15.30-2-pve"
    kernels = parse_kernel_packages(uname, read("kernels/dpkg_l_pve7_duo.txt"), "")
    assert kernels.running == "5.15.30-2-pve"
    assert kernels.installed == ["5.15.35-1-pve", "5.15.30-2-pve"]
    assert kernels.newest == "5.15.35-1-pve"
    assert kernels.reboot_pending


def test_debian12_without_proxmox():
    kernels = parse_kernel_packages(
        "6.1.0-31-amd64", read("kernels/dpkg_l_debian12_linux_image.txt"), ""
    )
    assert kernels.installed == ["6.1.0-31-amd64"]  # linux-image-amd64 is a meta package
    assert kernels.newest == "6.1.0-31-amd64"
    assert not kernels.reboot_pending


def test_natural_sort_and_headers_ignored():
    kernels = parse_kernel_packages(
        "6.1.0-29-amd64", read("kernels/dpkg_l_debian12_zabbly.txt"), ""
    )
    assert kernels.installed == ["7.1.3-zabbly+", "6.1.0-50-amd64", "6.1.0-29-amd64"]
    assert "linux-headers-7.1.3-zabbly+" not in kernels.packages
    assert kernels.reboot_pending


def test_fact_output_from_a_container_without_kernel_packages():
    text = read("kernels/installed_kernels_fact_firecracker_container.txt")
    kernels = parse_installed_kernels(text)
    assert kernels.running == "6.18.44-fc-v1098"
    assert kernels.installed == [] and kernels.newest is None
    assert kernels.held_packages == []
    assert not kernels.reboot_pending


def test_real_dpkg_query_output_without_kernels():
    text = read("kernels/dpkg_query_format_debian12_container.txt")
    assert "linux-libc-dev 6.1.187-1 ii " in text.splitlines()  # trailing space kept by dpkg
    kernels = parse_kernel_packages("6.18.44-fc-v1098", text, "")
    assert kernels.installed == [] and kernels.packages == {}  # linux-libc-dev is no kernel


def test_dpkg_query_format_and_holds():
    # Lines in the InstalledKernels dpkg-query format ("${Package} ${Version} ${db:Status-Abbrev}",
    # see dpkg_query_format_debian12_container.txt for real output of it) built from the kernel
    # packages and versions listed by `pveversion -v` on a real PVE 8.3 host; the held package
    # is this test's own choice.
    pve = read("proxmox/pveversion_v_8.3.2.txt")
    lines = []
    for line in pve.splitlines():
        name, _, version = line.partition(": ")
        if name.startswith("proxmox-kernel-"):
            lines.append(f"{name} {version} ii ")
    text = (
        f"{KERNELS_MARKER_UNAME}\n6.8.12-5-pve\n{KERNELS_MARKER_DPKG}\n"
        + "\n".join(lines)
        + f"\n{KERNELS_MARKER_HOLD}\nproxmox-kernel-6.8.12-5-pve-signed\n"
    )
    kernels = parse_installed_kernels(text)
    assert kernels.installed == ["6.8.12-6-pve", "6.8.12-5-pve", "6.8.12-1-pve", "6.8.4-2-pve"]
    assert kernels.newest == "6.8.12-6-pve"
    assert kernels.running == "6.8.12-5-pve"
    assert kernels.reboot_pending
    assert kernels.held_packages == ["proxmox-kernel-6.8.12-5-pve-signed"]
    assert "proxmox-kernel-6.8" not in kernels.packages
    assert "proxmox-kernel-helper" not in kernels.packages


@pytest.mark.parametrize(
    ("package", "version"),
    [
        ("proxmox-kernel-6.8.12-4-pve-signed", "6.8.12-4-pve"),
        ("proxmox-kernel-6.8.12-4-pve", "6.8.12-4-pve"),
        ("pve-kernel-5.15.30-2-pve", "5.15.30-2-pve"),
        ("linux-image-6.1.0-31-amd64", "6.1.0-31-amd64"),
        ("linux-image-6.1.0-31-amd64-unsigned", "6.1.0-31-amd64"),
        ("linux-image-unsigned-6.8.0-45-generic", "6.8.0-45-generic"),
        ("linux-image-6.1.0-26-amd64-dbg", None),
        ("linux-image-amd64", None),
        ("linux-image-cloud-amd64", None),
        ("proxmox-kernel-6.8", None),
        ("pve-kernel-5.13", None),
        ("proxmox-kernel-helper", None),
        ("pve-kernel-libc-dev", None),
        ("linux-headers-6.1.0-31-amd64", None),
    ],
)
def test_kernel_version_from_package(package, version):
    assert kernel_version_from_package(package) == version


def test_version_key_orders_numerically():
    versions = ["6.8.4-2-pve", "6.8.12-4-pve", "6.5.13-6-pve", "6.11.11-2-pve", "6.14.8-2-pve"]
    assert sorted(versions, key=kernel_version_key, reverse=True) == [
        "6.14.8-2-pve",
        "6.11.11-2-pve",
        "6.8.12-4-pve",
        "6.8.4-2-pve",
        "6.5.13-6-pve",
    ]


@pytest.mark.parametrize("text", ["", "garbage line\n\n", "dpkg-query: no packages found"])
def test_empty_inputs(text):
    kernels = parse_kernel_packages("", text, "")
    assert kernels.running == ""
    assert kernels.installed == [] and kernels.newest is None and kernels.held_packages == []

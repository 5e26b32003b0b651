"""Kernel names of today on real listings (tests/data/kernels, tests/data/proxmox; SOURCES.md):
Debian 13 ('6.12.69+deb13-amd64', '-cloud-amd64', meta linux-image-amd64 / -cloud-amd64),
Debian 12 backports ('6.12.27+bpo-amd64'), Proxmox VE 8 and 9 ('6.8.4-2-pve', '6.14.11-9-pve',
'6.17.13-13-pve', '7.0.6-2-pve', meta proxmox-kernel-6.17 / -7.0, proxmox-default-kernel,
-signed). Ordered newest first as dpkg orders versions (7.0 after 6.17), never as strings."""

import re

import pytest

from gpunode.facts.kernels import (
    is_kernel_release,
    kernel_version_from_package,
    parse_kernel_packages,
)
from gpunode.facts.proxmox import parse_proxmox_kernel_list, parse_pveversion
from gpunode.profile.loader import ProfileError
from gpunode.profile.node import NodeProfile
from gpunode.roles.kernel import plan_kernel_pin

from ._data import read


def uname(relative: str) -> str:
    return read(relative).strip()


def pveversion_kernels(relative: str):
    """`pveversion -v` kernel lines ("proxmox-kernel-7.0.6-2-pve-signed: 7.0.6-2") as the
    dpkg-query lines InstalledKernels reads ("NAME VERSION ii"), running kernel from its
    first line."""
    text = read(relative)
    lines = [f"{m.group(1)} {m.group(2)} ii " for m in
             re.finditer(r"^(proxmox-kernel-\S+): (\S+)$", text, re.MULTILINE)]
    running = parse_pveversion(text).running_kernel or ""
    return parse_kernel_packages(running, "\n".join(lines), "")


def test_debian13_with_proxmox_kernel_7_0():
    """Proxmox VE 9 installed on Debian 13: Debian's 6.12 kernels next to Proxmox's 7.0."""
    kernels = parse_kernel_packages("", read("kernels/dpkg_l_debian13_pve9_kernel_7.0.txt"), "")
    assert kernels.installed == ["7.0.2-4-pve", "6.12.88+deb13-amd64", "6.12.69+deb13-amd64"]
    assert kernels.newest == "7.0.2-4-pve"
    assert kernels.packages == {
        "linux-image-6.12.69+deb13-amd64": "6.12.69+deb13-amd64",
        "linux-image-6.12.88+deb13-amd64": "6.12.88+deb13-amd64",
        "proxmox-kernel-7.0.2-4-pve-signed": "7.0.2-4-pve",
    }  # rc kernels, linux-image-amd64, proxmox-kernel-7.0 and the helper are no kernel


def test_debian13_cloud_kernel_after_the_upgrade_from_12():
    kernels = parse_kernel_packages(uname("kernels/uname_r_debian13_cloud_6.12.69.txt"),
                                    read("kernels/dpkg_l_debian13_cloud_after_upgrade.txt"), "")
    assert kernels.running == "6.12.69+deb13-cloud-amd64"
    assert kernels.installed == ["6.12.69+deb13-cloud-amd64", "6.1.0-43-cloud-amd64"]
    assert not kernels.reboot_pending


def test_debian13_cloud_and_generic_flavours_of_one_release():
    kernels = parse_kernel_packages(uname("kernels/uname_r_debian13_cloud_6.12.63.txt"),
                                    read("kernels/dpkg_l_debian13_cloud_and_generic.txt"), "")
    # dpkg: '6.12.63+deb13' < '6.12.63+deb13-cloud' (end of string sorts before '-')
    assert kernels.installed == ["6.12.63+deb13-cloud-amd64", "6.12.63+deb13-amd64"]
    assert kernels.running == kernels.newest == "6.12.63+deb13-cloud-amd64"


def test_debian12_backports_kernel():
    kernels = parse_kernel_packages(uname("kernels/uname_r_debian12_bpo_6.12.27.txt"),
                                    read("kernels/dpkg_l_debian12_bpo_6.12.txt"), "")
    assert kernels.installed == ["6.12.27+bpo-amd64", "6.1.0-37-amd64", "6.1.0-35-amd64"]
    assert not kernels.reboot_pending


def test_proxmox_6_17_ordered_as_numbers():
    """6.17.9 before 6.17.4 although '9' > '4' as strings too; zfs lines are no kernel."""
    kernels = parse_kernel_packages("", read("kernels/dpkg_l_omv8_proxmox_kernel_6.17.txt"), "")
    assert kernels.installed == ["6.17.9-1-pve", "6.17.4-2-pve"]
    assert "proxmox-kernel-6.17" not in kernels.packages


def test_pve8_default_kernel_meta():
    kernels = parse_kernel_packages(uname("kernels/uname_r_pve8.2_6.8.4-2.txt"),
                                    read("kernels/dpkg_l_pve8.2_default_kernel.txt"), "")
    assert kernels.installed == ["6.8.4-2-pve"]
    assert list(kernels.packages) == ["proxmox-kernel-6.8.4-2-pve-signed"]
    assert not kernels.reboot_pending


def test_pve9_2_kernel_7_0_sorts_after_6_17_and_6_14():
    kernels = pveversion_kernels("proxmox/pveversion_v_9.2.3.txt")
    assert kernels.running == "7.0.6-2-pve"
    assert kernels.installed == ["7.0.6-2-pve", "6.17.13-13-pve", "6.17.13-1-pve",
                                 "6.14.11-9-pve", "6.14.8-2-pve"]
    assert not kernels.reboot_pending
    assert "proxmox-kernel-7.0" not in kernels.packages


def test_pve9_1_running_its_newest_kernel():
    kernels = pveversion_kernels("proxmox/pveversion_v_9.1.1.txt")
    assert kernels.installed == ["6.17.2-1-pve", "6.14.11-4-pve", "6.14.8-2-pve"]
    assert kernels.running == kernels.newest == "6.17.2-1-pve"


def test_pve9_kernel_list_pinned_to_6_14():
    """proxmox-boot-tool sorts its list as strings (6.17.13 before 6.17.9); the pin is read."""
    kernels, pinned = parse_proxmox_kernel_list(
        read("proxmox/boot_tool_kernel_list_pve9_pinned_6.14.txt"))
    assert kernels == ["6.14.11-5-pve", "6.17.13-1-pve", "6.17.9-1-pve"]
    assert pinned == uname("proxmox/uname_r_pve9_6.14.11-5.txt") == "6.14.11-5-pve"
    assert all(is_kernel_release(k) for k in kernels)


REAL_PACKAGES = [
    ("linux-image-6.12.69+deb13-amd64", "6.12.69+deb13-amd64"),
    ("linux-image-6.12.69+deb13-cloud-amd64", "6.12.69+deb13-cloud-amd64"),
    ("linux-image-6.1.0-43-cloud-amd64", "6.1.0-43-cloud-amd64"),
    ("linux-image-6.12.27+bpo-amd64", "6.12.27+bpo-amd64"),
    ("proxmox-kernel-7.0.2-4-pve-signed", "7.0.2-4-pve"),
    ("proxmox-kernel-7.0.6-2-pve-signed", "7.0.6-2-pve"),
    ("proxmox-kernel-6.17.13-13-pve-signed", "6.17.13-13-pve"),
    ("proxmox-kernel-6.14.11-9-pve-signed", "6.14.11-9-pve"),
    ("proxmox-kernel-6.8.4-2-pve-signed", "6.8.4-2-pve"),
    ("linux-image-cloud-amd64", None),
    ("linux-image-amd64", None),
    ("proxmox-kernel-7.0", None),
    ("proxmox-kernel-6.17", None),
    ("proxmox-kernel-6.14", None),
    ("proxmox-default-kernel", None),
    ("proxmox-kernel-helper", None),
    ("libzfs7linux:amd64", None),
]


@pytest.mark.parametrize(("package", "version"), REAL_PACKAGES)
def test_real_package_names(package, version):
    assert kernel_version_from_package(package) == version


@pytest.mark.parametrize("release", sorted({v for _, v in REAL_PACKAGES if v}
                                           | {"6.14.11-5-pve", "6.17.9-1-pve"}))
def test_kernel_pin_accepts_every_real_release(release):
    assert NodeProfile(kernel_pin=release).kernel_pin == release


@pytest.mark.parametrize("value", ["7.0", "6.17", "proxmox-kernel-6.17", "linux-image-amd64",
                                   "6.12.69+deb13-amd64\n", " 6.14.11-5-pve", "6.8.4-2-pve;true"])
def test_kernel_pin_refuses_series_package_names_and_unanchored_text(value):
    with pytest.raises(ValueError, match="not a kernel version|line break"):
        NodeProfile(kernel_pin=value)


def test_pin_a_debian13_cloud_kernel_sets_its_grub_entry():
    kernels = parse_kernel_packages(uname("kernels/uname_r_debian13_cloud_6.12.69.txt"),
                                    read("kernels/dpkg_l_debian13_cloud_after_upgrade.txt"), "")
    pin = plan_kernel_pin("gpu1", "running", kernels, is_proxmox=False)
    assert pin is not None and pin.packages == ["linux-image-6.12.69+deb13-cloud-amd64"]
    assert pin.grub_entry == ("Advanced options for Debian GNU/Linux>Debian GNU/Linux, with "
                              "Linux 6.12.69+deb13-cloud-amd64")


def test_pin_on_pve9_holds_the_signed_package_and_refuses_a_series():
    kernels = pveversion_kernels("proxmox/pveversion_v_9.2.3.txt")
    pin = plan_kernel_pin("pve", "6.17.13-13-pve", kernels, is_proxmox=True)
    assert pin is not None and pin.packages == ["proxmox-kernel-6.17.13-13-pve-signed"]
    assert pin.grub_entry is None  # proxmox-boot-tool kernel pin does it
    with pytest.raises(ProfileError, match="not an installed kernel"):
        plan_kernel_pin("pve", "6.17.4-2-pve", kernels, is_proxmox=True)


@pytest.mark.parametrize(("relative", "manager", "kernel"), [
    ("proxmox/pveversion_v_9.2.3.txt", "9.2.3", "7.0.6-2-pve"),
    ("proxmox/pveversion_v_9.1.1.txt", "9.1.1", "6.17.2-1-pve"),
])
def test_pveversion_of_proxmox_ve_9(relative, manager, kernel):
    version = parse_pveversion(read(relative))
    assert (version.manager_version, version.running_kernel) == (manager, kernel)


def test_audit_kernel_check_on_pve9_and_debian13():
    from gpunode.facts.cmdline import CmdlineState
    from gpunode.ops.cmdline import set_grub_default_entry
    from gpunode.roles.audit.system_checks import check_kernel
    from tests.unit.audit.test_rules import bare

    (pve9,) = check_kernel(NodeProfile(), bare(kernels=pveversion_kernels(
        "proxmox/pveversion_v_9.2.3.txt")))
    assert (pve9.status, pve9.live) == ("ok", "7.0.6-2-pve (newest installed)")
    kernels = parse_kernel_packages("6.12.63+deb13-amd64",
                                    read("kernels/dpkg_l_debian13_cloud_and_generic.txt"), "")
    entry = ("Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux "
             "6.12.63+deb13-amd64")
    grub = set_grub_default_entry(read("grub/debian12-default-grub"), entry)
    (pinned,) = check_kernel(NodeProfile(), bare(
        kernels=kernels, cmdline=CmdlineState(grub_default_text=grub)))
    assert (pinned.status, pinned.live) == ("ok", "6.12.63+deb13-amd64 (pinned on the host)")


@pytest.mark.parametrize(("release", "package"), [
    ("6.17.2-1-pve", "proxmox-kernel-6.17.2-1-pve-signed"),
    ("7.0.6-2-pve", "proxmox-kernel-7.0.6-2-pve-signed"),
    ("6.12.69+deb13-cloud-amd64", "linux-image-6.12.69+deb13-cloud-amd64"),
])
def test_audit_names_the_package_of_a_missing_pinned_kernel(release, package):
    from gpunode.roles.audit.system_checks import check_kernel, kernel_package
    from tests.unit.audit.test_rules import bare

    assert kernel_package(release) == package
    kernels = parse_kernel_packages("6.12.63+deb13-amd64",
                                    read("kernels/dpkg_l_debian13_cloud_and_generic.txt"), "")
    (check,) = check_kernel(NodeProfile(kernel_pin=release), bare(kernels=kernels))
    assert check.status == "P1" and check.fix.startswith(f"install {package} or pin")

"""Kernel pin planning on real kernel package lists."""

import pytest

from gpunode.facts.kernels import parse_kernel_packages
from gpunode.profile.loader import ProfileError
from gpunode.roles.kernel import (
    DEBIAN_GRUB_ENTRY,
    BootPlan,
    pending_reboot_reasons,
    plan_kernel_pin,
)

# dpkg-query format; packages as a Debian 12 host lists them.
DPKG = """linux-image-6.1.0-28-amd64 6.1.119-1 ii
linux-image-6.1.0-31-amd64 6.1.128-1 ii
linux-image-amd64 6.1.128-1 ii
"""


def kernels(running: str = "6.1.0-28-amd64"):
    return parse_kernel_packages(running, DPKG, "")


def test_running_pin_on_debian_holds_its_package_and_sets_grub_default():
    pin = plan_kernel_pin("h", "running", kernels(), is_proxmox=False)
    assert pin.version == "6.1.0-28-amd64"
    assert pin.packages == ["linux-image-6.1.0-28-amd64"]
    assert pin.grub_entry == DEBIAN_GRUB_ENTRY.format(version="6.1.0-28-amd64")
    assert pending_reboot_reasons(BootPlan(params={}, pending={}), pin) == []


def test_pin_to_another_installed_kernel_is_pending_reboot():
    pin = plan_kernel_pin("h", "6.1.0-31-amd64", kernels(), is_proxmox=True)
    assert pin.grub_entry is None
    assert pending_reboot_reasons(BootPlan(params={}, pending={}), pin) == [
        "kernel 6.1.0-31-amd64 pinned, 6.1.0-28-amd64 running"]


def test_pin_to_a_missing_kernel_names_host_field_and_choices():
    with pytest.raises(ProfileError) as error:
        plan_kernel_pin("gpu-3", "6.1.0-99-amd64", kernels(), is_proxmox=False)
    assert str(error.value).startswith("gpu-3: gpunode.kernel_pin: '6.1.0-99-amd64' is not an "
                                       "installed kernel (installed: 6.1.0-31-amd64, "
                                       "6.1.0-28-amd64)")


def test_no_pin():
    assert plan_kernel_pin("h", None, kernels(), is_proxmox=False) is None


def test_held_kernel_still_counts_as_installed():
    """Seen in the lab: after `apt-mark hold`, dpkg's Status-Abbrev reads 'hi', not 'ii'."""
    held = parse_kernel_packages("6.1.0-28-amd64", DPKG.replace("28-amd64 6.1.119-1 ii",
                                                                 "28-amd64 6.1.119-1 hi"), "")
    assert "6.1.0-28-amd64" in held.installed
    assert plan_kernel_pin("h", "running", held, is_proxmox=False).packages == [
        "linux-image-6.1.0-28-amd64"]

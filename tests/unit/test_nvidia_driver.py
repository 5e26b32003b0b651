"""NVIDIA driver pin decisions and dpkg parsing."""

from fnmatch import fnmatch
from pathlib import Path

import pytest

from gpunode.facts.dpkg import parse_dpkg_query, upstream_version
from gpunode.ops.nvidia_pin import NVIDIA_PATTERNS
from gpunode.profile.node import NodeProfile
from gpunode.roles.nvidia_driver import DriverPlan, mismatch_action
from gpunode.roles.nvidia_driver.packages import (
    driver_release_packages,
    is_driver_release_package,
)

# `dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\n'` layout; versions as
# Debian bookworm ships them (nvidia-driver 535.216.03-1~deb12u1 in bookworm/non-free).
DPKG = """nvidia-driver 535.216.03-1~deb12u1 ii
nvidia-kernel-dkms 535.216.03-1~deb12u1 ii
libnvidia-ml1:amd64 535.216.03-1~deb12u1 ii
nvidia-settings 525.125.06-1 rc
"""


def test_parse_dpkg_installed_only():
    packages = parse_dpkg_query(DPKG)
    assert packages == {"nvidia-driver": "535.216.03-1~deb12u1",
                        "nvidia-kernel-dkms": "535.216.03-1~deb12u1",
                        "libnvidia-ml1:amd64": "535.216.03-1~deb12u1"}


def test_upstream_version():
    assert upstream_version("535.216.03-1~deb12u1") == "535.216.03"
    assert upstream_version("1:550.127.05-0ubuntu1") == "550.127.05"
    assert upstream_version("550.127.05") == "550.127.05"


def test_plan_matches_only_when_installed_and_loaded_agree():
    installed = parse_dpkg_query(DPKG)
    assert DriverPlan(wanted="535.216.03", installed=installed, loaded="535.216.03").mismatch() \
        is None
    loaded_old = DriverPlan(wanted="535.216.03", installed=installed, loaded="535.183.01")
    assert loaded_old.matches and "loaded: 535.183.01" in loaded_old.mismatch()
    other = DriverPlan(wanted="550.127.05", installed=installed, loaded=None)
    assert not other.matches
    assert other.mismatch() == ("NVIDIA driver 550.127.05 wanted; installed: 535.216.03; "
                                "loaded: none")
    assert not DriverPlan(wanted="550.127.05", installed={}, loaded=None).matches


def test_held_driver_package_counts_as_installed():
    assert parse_dpkg_query("nvidia-driver 535.216.03-1~deb12u1 hi\n") == {
        "nvidia-driver": "535.216.03-1~deb12u1"}


# --- the driver path on real package sets (tests/data/nvidia/dpkg/, sources in SOURCES.md) ---

DPKG_DIR = Path(__file__).parents[1] / "data" / "nvidia" / "dpkg"


def dpkg_query_view(name: str) -> dict[str, str]:
    """A real `dpkg -l` listing as InstalledPackages sees it: the packages matching
    NVIDIA_PATTERNS, in dpkg-query's 'NAME VERSION STATUS' layout (no ':arch')."""
    lines = []
    for line in (DPKG_DIR / name).read_text().splitlines():
        status, package, version = line.split()[:3]
        package = package.split(":", 1)[0]
        if any(fnmatch(package, pattern) for pattern in NVIDIA_PATTERNS):
            lines.append(f"{package} {version} {status}")
    return parse_dpkg_query("\n".join(lines))


@pytest.mark.parametrize(
    ("listing", "driver", "others"),
    [
        # Debian 11, NVIDIA's CUDA repository: driver 535.86.10 beside the container
        # toolkit 1.13.5 and CUDA 12.2 packages.
        ("dpkg_l_debian11_cuda_repo_535_toolkit.txt", "535.86.10",
         {"nvidia-container-toolkit", "nvidia-container-toolkit-base"}),
        # Debian 12, CUDA repository 545.23.08 with the container toolkit 1.14.3.
        ("dpkg_l_debian12_cuda_repo_545_toolkit.txt", "545.23.08",
         {"nvidia-container-toolkit", "nvidia-container-toolkit-base"}),
        # Debian testing: nvidia-kernel-common / nvidia-installer-cleanup are 20151021+12.
        ("dpkg_l_debian_testing_450_support_packages.txt", "450.80.02",
         {"nvidia-kernel-common", "nvidia-installer-cleanup"}),
        # Debian 12's own driver 525.147.05-4~deb12u1.
        ("dpkg_l_debian12_525_deb12u1.txt", "525.147.05", set()),
        # Ubuntu 20.04: libnvidia-container 1.9.0 beside the 470 libraries.
        ("dpkg_l_ubuntu2004_470_toolkit.txt", "470.103.01",
         {"libnvidia-container-tools", "libnvidia-container1"}),
    ],
)
def test_matches_looks_only_at_the_driver_release(listing, driver, others):
    installed = dpkg_query_view(listing)
    release = driver_release_packages(installed)
    assert others <= set(installed) - set(release), "toolkits and helpers are not the driver"
    assert not any(p.startswith("cuda-") and not p.startswith("cuda-drivers") for p in release)
    plan = DriverPlan(wanted=driver, installed=release, loaded=driver)
    assert plan.matches and plan.mismatch() is None
    assert not DriverPlan(wanted="550.127.05", installed=release, loaded=None).matches


def test_the_container_toolkit_no_longer_blocks_the_pin():
    """Before: every nvidia-*/libnvidia-* package had to carry the driver's version, so a
    host with nvidia-container-toolkit never matched (pin never written, or a reinstall
    on every run)."""
    installed = dpkg_query_view("dpkg_l_debian11_cuda_repo_535_toolkit.txt")
    assert not DriverPlan(wanted="535.86.10", installed=installed, loaded=None).matches
    assert DriverPlan(wanted="535.86.10", installed=driver_release_packages(installed),
                      loaded=None).matches


@pytest.mark.parametrize(
    ("name", "is_driver"),
    [("nvidia-driver", True), ("nvidia-driver-libs:i386", True), ("libcuda1", True),
     ("nvidia-kernel-dkms", True), ("nvidia-open-kernel-dkms", True),
     ("nvidia-kernel-open-dkms", True), ("cuda-drivers", True), ("cuda-drivers-550", True),
     ("libnvidia-ml1", True), ("firmware-nvidia-gsp", True), ("nvidia-utils-550", True),
     ("nvidia-container-toolkit", False), ("libnvidia-container1", False),
     ("cuda-toolkit-12-8", False), ("cuda-nvcc-12-2", False), ("nvidia-cuda-toolkit", False),
     ("nvidia-kernel-common", False), ("nvidia-settings", False),
     ("nvidia-persistenced", False), ("nvidia-modprobe", False),
     ("libnvidia-egl-wayland1", False), ("nvidia-docker2", False)],
)
def test_driver_release_package_names(name, is_driver):
    assert is_driver_release_package(name) is is_driver


def test_no_nvidia_package_says_what_to_set():
    """No NVIDIA package at all (the fact may even come back empty): a clear message, not
    a TypeError, naming the setting that lets gpunode install the driver."""
    assert driver_release_packages(None) == {}
    plan = DriverPlan(wanted="550.127.05", installed=driver_release_packages(None), loaded=None)
    assert plan.none_installed and not plan.matches
    assert "no NVIDIA driver package is installed" in plan.mismatch()
    action = mismatch_action(NodeProfile(nvidia_driver="550.127.05"), plan, "open")
    assert action.startswith("set nvidia_driver_change: true to let gpunode install")
    assert "at 550.127.05" in action
    allowed = NodeProfile(nvidia_driver="550.127.05", nvidia_driver_change=True,
                          nvidia_packages=["cuda-drivers-550"])
    assert mismatch_action(allowed, plan, "open") == "installing cuda-drivers-550 at 550.127.05"


def test_packages_follow_the_flavour_and_repository():
    from gpunode.profile.node import NodeProfile
    from gpunode.roles.nvidia_driver import packages_to_install

    assert packages_to_install(NodeProfile(), "open") == ["nvidia-driver",
                                                          "nvidia-open-kernel-dkms"]
    assert packages_to_install(NodeProfile(), "proprietary") == ["nvidia-driver",
                                                                 "nvidia-kernel-dkms"]
    assert packages_to_install(NodeProfile(nvidia_repository="cuda"), "open") == ["nvidia-open"]
    assert packages_to_install(NodeProfile(nvidia_repository="cuda"),
                               "proprietary") == ["cuda-drivers"]
    assert packages_to_install(NodeProfile(nvidia_kernel_modules="proprietary"),
                               None) == ["nvidia-driver", "nvidia-kernel-dkms"]
    assert packages_to_install(NodeProfile(nvidia_packages=["nvidia-driver-full"]),
                               "open") == ["nvidia-driver-full"]

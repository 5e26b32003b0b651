"""NVIDIA driver pin decisions and dpkg parsing."""

from gpunode.roles.facts.dpkg import parse_dpkg_query, upstream_version
from gpunode.roles.nvidia_driver import DriverPlan

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

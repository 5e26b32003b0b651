"""The NVIDIA driver's apt pin and hold, proven by the guest's own apt (apt 3 on Debian 13).

No NVIDIA driver exists in the lab: a stand-in package named like a driver-release package
(libnvidia-ml1 at 550.127.05-1, built in the guest with dpkg-deb, no files) is installed with
dpkg. With nvidia_driver: 550.127.05 the deploy writes /etc/apt/preferences.d/
90-gpunode-nvidia.pref and holds the package; `apt-cache policy` must show the pin's priority
(1001) on that version and `apt-mark showhold` the hold. Runs after test_deploy_cycle.py on the
converged guest and puts it back (package, hold and pin removed) for the tests after it.
"""

from __future__ import annotations

import re

import pytest

from gpunode.ops.nvidia_pin import PREFERENCES_FILE
from tests.lab.guest import sh
from tests.lab.pyinfra_cli import run_pyinfra

pytestmark = pytest.mark.lab

SITE = "deploy/site.py"
DRIVER = "550.127.05"
PACKAGE = "libnvidia-ml1"
BUILD = f"""set -e
d=$(mktemp -d); mkdir "$d/DEBIAN"
printf 'Package: {PACKAGE}\\nVersion: {DRIVER}-1\\nArchitecture: all\\nMaintainer: gpunode lab \
<lab@localhost>\\nDescription: gpunode lab stand-in for an NVIDIA driver package\\n' \
  > "$d/DEBIAN/control"
dpkg-deb --build "$d" /tmp/{PACKAGE}.deb >/dev/null && dpkg -i /tmp/{PACKAGE}.deb >/dev/null
rm -rf "$d" /tmp/{PACKAGE}.deb
"""


@pytest.fixture
def stand_in_driver(lab_vm):
    sh(lab_vm, BUILD)
    yield
    sh(lab_vm, f"apt-mark unhold {PACKAGE} >/dev/null; dpkg --purge {PACKAGE} >/dev/null; "
               f"rm -f {PREFERENCES_FILE}")


def test_pin_and_hold_are_what_apt_applies(lab_vm, stand_in_driver):
    env = {"GPUNODE_LAB_NVIDIA_DRIVER": DRIVER}
    dry = run_pyinfra(SITE, "--dry", env=env)
    assert dry.returncode == 0, dry.log
    assert any("Pin NVIDIA" in op or "preferences" in op.lower() for op in dry.planned_changes()), (
        dry.planned_changes())
    assert any(f"Hold NVIDIA driver {DRIVER}" in op for op in dry.planned_changes())
    assert lab_vm.ssh(f"test -e {PREFERENCES_FILE}")[0] != 0, "--dry wrote the pin"

    run = run_pyinfra(SITE, "-y", env=env)
    assert run.returncode == 0, run.log
    policy = sh(lab_vm, f"apt-cache policy {PACKAGE}")
    assert re.search(rf"\*\*\* {re.escape(DRIVER)}-1 1001\b", policy), policy
    assert PACKAGE in sh(lab_vm, "apt-mark showhold").split()

    again = run_pyinfra(SITE, "-y", env=env)
    assert again.returncode == 0 and again.changed() == [], again.changed()

"""The driver upgrade (issue 41) through deploy/site.py, with the guest's real apt and dpkg.

No NVIDIA driver exists in the lab: stand-in packages named like the driver release
(libnvidia-ml1; nvidia-kernel-support shipping /lib/modules/<running>/updates/dkms/nvidia.ko,
a placeholder file, not a module) are built in the guest at A (550.127.05-1), B (550.135-1)
and B' (550.142-1, whose libnvidia-ml1 postinst exits 1), in a local flat apt repository
(trusted=yes). /dev/nvidia0 is a stand-in char device (1:3) that a `sleep` holds open.

In order: A installed and held; B' fails in its maintainer script (host back on A, holds
set); B refused while the device is held, nothing changed; the holder stopped, A -> B (read
back, holds, the previous version recorded), a re-run changes nothing; B -> A. In each
apply, the change lines equal the --dry's. Not covered: containers (no pct in the lab: the
container half is tested on its script text), a real module reload, nvidia-smi.
"""

from __future__ import annotations

import pytest

from gpunode.facts.driver_upgrade import RECORD_FILE
from gpunode.ops.nvidia_pin import PREFERENCES_FILE
from tests.lab.guest import sh
from tests.lab.pyinfra_cli import run_pyinfra

pytestmark = pytest.mark.lab

SITE = "deploy/site.py"
A, B, BAD = "550.127.05", "550.135", "550.142"
REPO_DIR = "/srv/gpunode-lab-repo"
LIST = "/etc/apt/sources.list.d/gpunode-lab-repo.list"
PACKAGES = ("libnvidia-ml1", "nvidia-kernel-support")
BUILD = rf"""set -e
k=$(uname -r); mkdir -p {REPO_DIR}; cd {REPO_DIR}
mk() {{ d=$(mktemp -d); mkdir -p "$d/DEBIAN"
  printf 'Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: %s\nDescription: %s\n' \
    "$1" "$2" "gpunode lab <lab@localhost>" "gpunode lab stand-in for an NVIDIA driver package" \
    > "$d/DEBIAN/control"
  if [ "$1" = nvidia-kernel-support ]; then m="$d/lib/modules/$k/updates/dkms"; mkdir -p "$m"
    echo "stand-in $2" > "$m/nvidia.ko"; fi
  if [ "$3" = fail ]; then printf '#!/bin/sh\necho "stand-in postinst fails" >&2\nexit 1\n' \
    > "$d/DEBIAN/postinst"; chmod 755 "$d/DEBIAN/postinst"; fi
  dpkg-deb --build "$d" "$1_$2_all.deb" >/dev/null; rm -rf "$d"; }}
for v in {A} {B}; do mk libnvidia-ml1 "$v-1"; mk nvidia-kernel-support "$v-1"; done
mk libnvidia-ml1 {BAD}-1 fail; mk nvidia-kernel-support {BAD}-1
: > Packages
for f in *.deb; do dpkg-deb -f "$f" Package Version Architecture Maintainer Description >> Packages
  printf 'Filename: ./%s\nSize: %s\nSHA256: %s\n\n' "$f" "$(stat -c %s "$f")" \
    "$(sha256sum "$f" | cut -d' ' -f1)" >> Packages; done
echo 'deb [trusted=yes] file:{REPO_DIR} ./' > {LIST}
apt-get update -q -o Dir::Etc::sourcelist={LIST} -o Dir::Etc::sourceparts=- \
  -o APT::Get::List-Cleanup=0 >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q libnvidia-ml1={A}-1 \
  nvidia-kernel-support={A}-1 >/dev/null
apt-mark hold libnvidia-ml1 nvidia-kernel-support >/dev/null
[ -e /dev/nvidia0 ] || mknod /dev/nvidia0 c 1 3
"""
CLEAN = (f"apt-mark unhold {' '.join(PACKAGES)} >/dev/null; dpkg --purge {' '.join(PACKAGES)} "
         f">/dev/null; rm -rf {REPO_DIR} {LIST} {PREFERENCES_FILE} {RECORD_FILE} /dev/nvidia0 "
         "/var/lib/apt/lists/_srv_gpunode-lab-repo_*")


@pytest.fixture
def stand_in_releases(lab_vm):
    sh(lab_vm, BUILD, timeout=180)
    yield
    sh(lab_vm, CLEAN)


def versions(vm) -> dict[str, str]:
    out = sh(vm, "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' "
             + " ".join(PACKAGES))
    rows = [line.split() for line in out.splitlines()]
    return {r[0]: f"{r[1]} {'installed' if r[2][1:2] == 'i' else r[2]}" for r in rows}


def held(vm) -> set[str]:
    return set(sh(vm, "apt-mark showhold").split()) & set(PACKAGES)


def dry_then_apply(version: str):
    env = {"GPUNODE_LAB_NVIDIA_DRIVER": version, "GPUNODE_LAB_NVIDIA_DRIVER_CHANGE": "1"}
    dry = run_pyinfra(SITE, "--dry", env=env)
    run = run_pyinfra(SITE, "-y", env=env)
    upgrade = [line for line in run.change_lines() if "NVIDIA driver upgrade" in line]
    assert upgrade and upgrade == [line for line in dry.change_lines()
                                   if "NVIDIA driver upgrade" in line], (dry.log, run.log)
    return dry, run, env


def test_upgrade_refused_failed_switched_and_back(lab_vm, stand_in_releases):
    at_a = {p: f"{A}-1 installed" for p in PACKAGES}
    assert versions(lab_vm) == at_a

    # B': its postinst fails -> the host is back on A, holds set, the run fails saying so.
    _, bad, _ = dry_then_apply(BAD)
    assert bad.returncode != 0
    assert "failed at step 'host install'" in bad.log and f"on {A} again" in bad.log, bad.log
    assert versions(lab_vm) == at_a and held(lab_vm) == set(PACKAGES)

    # B while /dev/nvidia0 is held: refused before any change, the PID named.
    pid = sh(lab_vm, "nohup sh -c 'exec 3</dev/nvidia0; exec sleep 600' >/dev/null 2>&1 & "
                     "echo $!").strip()
    env = {"GPUNODE_LAB_NVIDIA_DRIVER": B, "GPUNODE_LAB_NVIDIA_DRIVER_CHANGE": "1"}
    refused = run_pyinfra(SITE, "-y", env=env)
    assert refused.returncode != 0 and "GPU processes run" in refused.log, refused.log
    assert versions(lab_vm) == at_a

    # The holder gone (a host process: never drained by gpunode): A -> B, then a no-op.
    sh(lab_vm, f"kill {int(pid)}; sleep 1")
    _, run, env = dry_then_apply(B)
    assert run.returncode == 0, run.log
    assert versions(lab_vm) == {p: f"{B}-1 installed" for p in PACKAGES}
    assert held(lab_vm) == set(PACKAGES)
    assert sh(lab_vm, f"cat {RECORD_FILE}").split() == [A, B]
    again = run_pyinfra(SITE, "-y", env=env)
    assert again.returncode == 0 and again.changed() == [], again.changed()

    # B -> A by setting the pin back: the same path.
    _, back, _ = dry_then_apply(A)
    assert back.returncode == 0, back.log
    assert versions(lab_vm) == at_a and held(lab_vm) == set(PACKAGES)
    assert sh(lab_vm, f"cat {RECORD_FILE}").split() == [B, A]

"""The driver upgrade (issue 41) through deploy/site.py, with the guest's real apt, dpkg and LXC.

No NVIDIA driver exists in the lab: stand-in packages named like the driver release
(libnvidia-ml1; nvidia-kernel-support shipping /lib/modules/<running>/updates/dkms/nvidia.ko,
a placeholder file, not a module) are built in the guest at A (550.127.05-1), B (550.135-1)
and B' (550.142-1, whose libnvidia-ml1 postinst exits 1), in a local flat apt repository
(trusted=yes). /dev/nvidia0 is a stand-in char device (1:3) that a `sleep` holds open.

The container: a real LXC container (Debian's lxc) named 110 whose rootfs is an overlay of the
guest's own root (its dpkg, apt and the repository; writes go to a tmpfs), with libnvidia-ml1
at A held (its nvidia-kernel-support purged: a container has the libraries only), and
/dev/nvidia0 bound in. `pct` is a stand-in (PCT below, /usr/local/sbin/pct) that maps the
verbs gpunode uses (status, start, stop, reboot, exec, list) onto lxc-info, lxc-start,
lxc-stop and lxc-attach; what runs in the container is the container's real apt and dpkg.

In order: A installed and held on host and container; B' fails in its maintainer script (host
back on A, container untouched on A, holds set); B refused while a host process and a process
in the container hold the device (drain refuse), nothing changed; the host holder stopped, B
with nvidia_driver_drain: stop-containers: the container stopped, A -> B on the host, the
container started, switched, rebooted (read back, holds, the previous version recorded), a
re-run changes nothing; C (550.144-1, whose libnvidia-ml1 postinst fails in a container only:
it reads container=lxc in /proc/1/environ) switches the host, fails in the container, and both
are back on B; B -> A on both (the container running: no drain). In each apply, the
change lines equal the --dry's. Not covered: Proxmox's own pct (its CLI output is tested on
captures), a real module reload, nvidia-smi.
"""
from __future__ import annotations

import shlex

import pytest

from gpunode.facts.driver_upgrade import RECORD_FILE
from gpunode.ops.nvidia_pin import PREFERENCES_FILE
from tests.lab.guest import sh
from tests.lab.pyinfra_cli import run_pyinfra

pytestmark = pytest.mark.lab

SITE = "deploy/site.py"
A, B, BAD, CT_BAD = "550.127.05", "550.135", "550.142", "550.144"
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
  if [ "$3" = fail-in-container ]; then printf '%s\n' '#!/bin/sh' \
    "if tr '\\0' '\\n' </proc/1/environ | grep -qx container=lxc; then" \
    '  echo "stand-in postinst fails in a container" >&2; exit 1; fi' > "$d/DEBIAN/postinst"
    chmod 755 "$d/DEBIAN/postinst"; fi
  dpkg-deb --build "$d" "$1_$2_all.deb" >/dev/null; rm -rf "$d"; }}
for v in {A} {B}; do mk libnvidia-ml1 "$v-1"; mk nvidia-kernel-support "$v-1"; done
mk libnvidia-ml1 {BAD}-1 fail; mk nvidia-kernel-support {BAD}-1
mk libnvidia-ml1 {CT_BAD}-1 fail-in-container; mk nvidia-kernel-support {CT_BAD}-1
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


CT, CT_DIR, CT_RUN = 110, "/var/lib/lxc/110", "/run/gpunode-lab-ct110"
PCT = r"""#!/bin/sh
# gpunode lab: Proxmox's pct verbs over the guest's real LXC (tests/lab/test_driver_upgrade.py)
verb=$1; shift
case $verb in
status) s=$(lxc-info -n "$1" -sH 2>/dev/null) || { echo "no container $1" >&2; exit 2; }
  [ "$s" = RUNNING ] && echo "status: running" || echo "status: stopped" ;;
start) lxc-start -n "$1" -d && lxc-wait -n "$1" -s RUNNING -t 30 ;;
stop) lxc-stop -n "$1" -k ;;
reboot) lxc-stop -n "$1" -k && lxc-start -n "$1" -d && lxc-wait -n "$1" -s RUNNING -t 30 ;;
exec) v=$1; shift; [ "$1" = -- ] && shift
  exec lxc-attach -n "$v" --clear-env -- env PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@" ;;
list) echo "VMID       Status     Lock         Name"
  for v in $(lxc-ls); do printf '%-10s %-10s %-12s %s\n' "$v" \
    "$(lxc-info -n "$v" -sH | tr A-Z a-z)" "" "ct$v"; done ;;
*) echo "gpunode lab pct: $verb is not a verb of this stand-in" >&2; exit 2 ;;
esac
"""
CT_CONFIG = f"""lxc.uts.name = ct{CT}
lxc.rootfs.path = dir:{CT_DIR}/rootfs
lxc.include = /usr/share/lxc/config/common.conf
lxc.apparmor.profile = unconfined
lxc.net.0.type = empty
lxc.init.cmd = /bin/sleep infinity
lxc.mount.entry = /dev/nvidia0 dev/nvidia0 none bind,optional,create=file 0 0
"""
CT_UP = (f"mkdir -p {CT_RUN}/upper {CT_RUN}/work {CT_DIR}/rootfs && mount -t overlay overlay "
         f"-o lowerdir=/,upperdir={CT_RUN}/upper,workdir={CT_RUN}/work {CT_DIR}/rootfs && "
         f"printf %s {shlex.quote(CT_CONFIG)} > {CT_DIR}/config && "
         f"printf %s {shlex.quote(PCT)} > /usr/local/sbin/pct && chmod 755 /usr/local/sbin/pct && "
         f"pct start {CT} && pct exec {CT} -- sh -c 'apt-mark unhold nvidia-kernel-support "
         ">/dev/null && dpkg --purge nvidia-kernel-support >/dev/null'")
CT_CLEAN = (f"lxc-stop -n {CT} -k 2>/dev/null; umount {CT_DIR}/rootfs 2>/dev/null; "
            f"rm -rf {CT_DIR} {CT_RUN} /usr/local/sbin/pct")


@pytest.fixture
def stand_in_releases(lab_vm):
    sh(lab_vm, BUILD, timeout=180)
    sh(lab_vm, CT_UP, timeout=120)
    yield
    sh(lab_vm, CT_CLEAN)
    sh(lab_vm, CLEAN)


def versions(vm, inside: str = "") -> dict[str, str]:
    """Package -> 'VERSION installed' on the host, or in the container (inside='pct exec ..')."""
    out = sh(vm, f"{inside} dpkg-query -W -f '${{Package}} ${{Version}} ${{db:Status-Abbrev}}\\n' "
             + " ".join(PACKAGES) + " 2>/dev/null; true")
    rows = [line.split() for line in out.splitlines() if len(line.split()) == 3]
    return {r[0]: f"{r[1]} {'installed' if r[2][1:2] == 'i' else r[2]}" for r in rows
            if r[2][1:2] != "n"}


def held(vm, inside: str = "") -> set[str]:
    return set(sh(vm, f"{inside} apt-mark showhold").split()) & set(PACKAGES)


IN_CT = f"pct exec {CT} --"


def dry_then_apply(version: str, drain: str = "refuse"):
    env = {"GPUNODE_LAB_NVIDIA_DRIVER": version, "GPUNODE_LAB_NVIDIA_DRIVER_CHANGE": "1",
           "GPUNODE_LAB_DRIVER_CONTAINERS": str(CT), "GPUNODE_LAB_DRIVER_DRAIN": drain}
    dry = run_pyinfra(SITE, "--dry", env=env)
    run = run_pyinfra(SITE, "-y", env=env)
    upgrade = [line for line in run.change_lines() if "NVIDIA driver upgrade" in line]
    assert upgrade and upgrade == [line for line in dry.change_lines()
                                   if "NVIDIA driver upgrade" in line], (dry.log, run.log)
    return dry, run, env


def hold_in(vm, where: str) -> int:
    """A process that holds /dev/nvidia0 open (on the host, or in the container: where=IN_CT)."""
    return int(sh(vm, f"nohup {where} sh -c 'exec 3</dev/nvidia0; exec sleep 600' >/dev/null "
                      "2>&1 & echo $!").strip())


def test_upgrade_refused_failed_switched_and_back(lab_vm, stand_in_releases):
    at_a = {p: f"{A}-1 installed" for p in PACKAGES}
    ct_at = {v: {"libnvidia-ml1": f"{v}-1 installed"} for v in (A, B)}
    assert versions(lab_vm) == at_a
    assert versions(lab_vm, IN_CT) == ct_at[A] and held(lab_vm, IN_CT) == {"libnvidia-ml1"}

    # B': its postinst fails -> the host is back on A, holds set, the run fails saying so; the
    # container (switched after the host) untouched on A.
    dry, bad, _ = dry_then_apply(BAD)
    assert f"container {CT} libnvidia-ml1 {A}-1 -> {BAD}-1" in dry.log, dry.log
    assert bad.returncode != 0
    assert "failed at step 'host install'" in bad.log and f"on {A} again" in bad.log, bad.log
    assert versions(lab_vm) == at_a and held(lab_vm) == set(PACKAGES)
    assert versions(lab_vm, IN_CT) == ct_at[A] and held(lab_vm, IN_CT) == {"libnvidia-ml1"}

    # B while a host process and one in the container hold /dev/nvidia0 (drain refuse): refused
    # before any change, both named.
    host_pid = hold_in(lab_vm, "")
    hold_in(lab_vm, IN_CT)
    env = {"GPUNODE_LAB_NVIDIA_DRIVER": B, "GPUNODE_LAB_NVIDIA_DRIVER_CHANGE": "1",
           "GPUNODE_LAB_DRIVER_CONTAINERS": str(CT)}
    refused = run_pyinfra(SITE, "-y", env=env)
    assert refused.returncode != 0 and "GPU processes run" in refused.log, refused.log
    assert f"container {CT}" in refused.log and str(host_pid) in refused.log, refused.log
    assert versions(lab_vm) == at_a and versions(lab_vm, IN_CT) == ct_at[A]

    # The host holder gone (a host process: never drained by gpunode); drain stop-containers:
    # the container stopped, A -> B on host and container, the container running again; a no-op.
    sh(lab_vm, f"kill {host_pid}; sleep 1")
    _, run, env = dry_then_apply(B, drain="stop-containers")
    assert run.returncode == 0, run.log
    assert versions(lab_vm) == {p: f"{B}-1 installed" for p in PACKAGES}
    assert held(lab_vm) == set(PACKAGES)
    assert sh(lab_vm, f"pct status {CT}").strip() == "status: running"
    assert versions(lab_vm, IN_CT) == ct_at[B] and held(lab_vm, IN_CT) == {"libnvidia-ml1"}
    assert "sleep 600" not in sh(lab_vm, f"{IN_CT} ps -eo args"), "the holder survived the drain"
    assert sh(lab_vm, f"cat {RECORD_FILE}").split() == [A, B]
    again = run_pyinfra(SITE, "-y", env=env)
    assert again.returncode == 0 and again.changed() == [], again.changed()

    # B -> C, whose libnvidia-ml1 postinst fails in a container only: the host switched first,
    # then the container fails -> host and container both back on B, holds set, named.
    _, ct_bad, _ = dry_then_apply(CT_BAD)
    assert ct_bad.returncode != 0
    assert f"failed at step 'container libraries' in container {CT}" in ct_bad.log, ct_bad.log
    assert f"on {B} again" in ct_bad.log, ct_bad.log
    assert versions(lab_vm) == {p: f"{B}-1 installed" for p in PACKAGES}
    assert held(lab_vm) == set(PACKAGES)
    assert versions(lab_vm, IN_CT) == ct_at[B] and held(lab_vm, IN_CT) == {"libnvidia-ml1"}

    # B -> A by setting the pin back: the same path, the container switched while it runs.
    _, back, _ = dry_then_apply(A)
    assert back.returncode == 0, back.log
    assert versions(lab_vm) == at_a and held(lab_vm) == set(PACKAGES)
    assert versions(lab_vm, IN_CT) == ct_at[A] and held(lab_vm, IN_CT) == {"libnvidia-ml1"}
    assert sh(lab_vm, f"cat {RECORD_FILE}").split() == [B, A]

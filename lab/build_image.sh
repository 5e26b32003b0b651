#!/usr/bin/env bash
# Build the gpunode lab disk image: Debian 13 (trixie, the default) or Debian 12 (bookworm), from
# Debian's apt repositories only. The suite is $GPUNODE_LAB_SUITE (trixie | bookworm).
#
#   build_image.sh OUT_DIR     build everything into OUT_DIR (must not exist yet)
#   build_image.sh --deps      only install the host tools it needs (apt-get), then exit
#
# OUT_DIR receives:
#   base.qcow2                 compressed qcow2 of a partitioned raw disk (msdos, ext4 root on p1,
#                              GRUB in the MBR: every boot goes through GRUB and /etc/default/grub)
#   id_ed25519{,.pub}          the lab's client key (root's only authorized key in the guest)
#   ssh_host_ed25519_key.pub   the guest's only SSH host key (the lab pins it in known_hosts)
#   vmlinuz, probe-initrd.gz   a kernel and a busybox initramfs for the KVM probe boot
#   build.json                 versions, timings and sizes
# Needs root (debootstrap, chroot, file ownership). The Python side (lab/image.py) caches OUT_DIR
# keyed on a hash of this file: any change here rebuilds the image.
set -euo pipefail

SUITE=${GPUNODE_LAB_SUITE:-trixie}
case "$SUITE" in
  trixie|bookworm) ;;
  *) echo "GPUNODE_LAB_SUITE=$SUITE: use trixie (Debian 13) or bookworm (Debian 12)" >&2; exit 2 ;;
esac
MIRROR=${GPUNODE_LAB_MIRROR:-http://deb.debian.org/debian}
DISK_MB=8192
PACKAGES=(
  linux-image-amd64 systemd-sysv udev dbus openssh-server pciutils kmod procps sudo python3
  iproute2 linux-cpupower grub-pc lxc busybox-static
)
# Timers and waits that only slow a throwaway lab boot down.
MASKED_UNITS=(
  apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer
  systemd-networkd-wait-online.service
)

log() { printf '[lab-build %4ds] %s\n' "$SECONDS" "$*"; }
die() { log "ERROR: $*"; exit 1; }

install_host_deps() {
  local -A need=(
    [qemu-system-x86_64]=qemu-system-x86 [qemu-img]=qemu-utils [debootstrap]=debootstrap
    [sfdisk]=fdisk [mkfs.ext4]=e2fsprogs [ssh-keygen]=openssh-client [cpio]=cpio [gzip]=gzip
  )
  local missing=() tool
  for tool in "${!need[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("${need[$tool]}")
  done
  [[ -f /usr/share/keyrings/debian-archive-keyring.gpg ]] || missing+=(debian-archive-keyring)
  ((${#missing[@]} == 0)) && return 0
  command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
  log "installing host packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

if [[ "${1:-}" == "--deps" ]]; then
  [[ $EUID -eq 0 ]] || die "run as root"
  install_host_deps
  exit 0
fi

OUT=${1:?usage: build_image.sh OUT_DIR | --deps}
[[ $EUID -eq 0 ]] || die "run as root (debootstrap and chroot need it)"
[[ -e "$OUT" ]] && die "$OUT exists"

WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/gpunode-lab-build.XXXXXX")
ROOT=$WORK/rootfs
RAW=$WORK/disk.raw

cleanup() {
  # Unmount whatever debootstrap or we left mounted under WORK (deepest first), then remove it
  # without crossing into any filesystem that is still mounted.
  local m
  for m in $(awk -v w="$WORK" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r); do
    umount -l "$m" || true
  done
  rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT

phase_start=$SECONDS
declare -A TIMES
phase_done() { TIMES[$1]=$((SECONDS - phase_start)); log "$1 done in ${TIMES[$1]} s"; phase_start=$SECONDS; }

install_host_deps
phase_done deps

debootstrap_rootfs() {
  local include
  include=$(IFS=,; echo "${PACKAGES[*]}")
  local cache=()
  if [[ -n "${GPUNODE_LAB_DEB_CACHE:-}" ]]; then
    mkdir -p "$GPUNODE_LAB_DEB_CACHE"
    cache=(--cache-dir="$GPUNODE_LAB_DEB_CACHE")
  fi
  log "debootstrap $SUITE from $MIRROR (minbase + ${#PACKAGES[@]} packages)"
  debootstrap --variant=minbase --components=main "${cache[@]}" --include="$include" \
    "$SUITE" "$ROOT" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -n 40 "$WORK/debootstrap.log"; die "debootstrap failed"; }
}

write_apt_sources() {
  # As each release's installer writes them: one-line sources.list on Debian 12, a deb822
  # debian.sources file on Debian 13 (apt 3's default format).
  if [[ $SUITE == bookworm ]]; then
    cat >"$ROOT/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb http://deb.debian.org/debian-security $SUITE-security main
EOF
    return
  fi
  rm -f "$ROOT/etc/apt/sources.list"
  cat >"$ROOT/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
}

write_guest_files() {
  local uuid=$1
  echo gpunode-lab >"$ROOT/etc/hostname"
  printf '127.0.0.1\tlocalhost\n127.0.1.1\tgpunode-lab\n::1\tlocalhost ip6-localhost\n' \
    >"$ROOT/etc/hosts"
  printf 'UUID=%s\t/\text4\terrors=remount-ro\t0\t1\n' "$uuid" >"$ROOT/etc/fstab"
  # QEMU user-mode networking: DHCP on the virtio NIC only (the e1000e stand-ins stay
  # unmanaged), DNS from slirp.
  printf 'nameserver 10.0.2.3\n' >"$ROOT/etc/resolv.conf"
  mkdir -p "$ROOT/etc/systemd/network"
  printf '[Match]\nDriver=virtio_net\n\n[Network]\nDHCP=ipv4\n' \
    >"$ROOT/etc/systemd/network/10-lab-virtio.network"
  write_apt_sources
  # GRUB: serial console, no menu wait. Debian's own GRUB_CMDLINE_LINUX_DEFAULT stays "quiet".
  sed -i -e 's/^GRUB_TIMEOUT=.*/GRUB_TIMEOUT=0/' \
    -e 's/^GRUB_CMDLINE_LINUX=.*/GRUB_CMDLINE_LINUX="console=ttyS0,115200n8"/' \
    "$ROOT/etc/default/grub"
  cat >>"$ROOT/etc/default/grub" <<'EOF'
GRUB_TERMINAL=serial
GRUB_SERIAL_COMMAND="serial --unit=0 --speed=115200"
EOF
  echo 'grub-pc grub-pc/install_devices multiselect /dev/vda' \
    | chroot "$ROOT" debconf-set-selections
  od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$ROOT/etc/machine-id"
}

write_ssh_files() {
  rm -f "$ROOT"/etc/ssh/ssh_host_*
  ssh-keygen -q -t ed25519 -N '' -C gpunode-lab-host -f "$ROOT/etc/ssh/ssh_host_ed25519_key"
  cp "$ROOT/etc/ssh/ssh_host_ed25519_key.pub" "$WORK/out/"
  ssh-keygen -q -t ed25519 -N '' -C gpunode-lab-client -f "$WORK/out/id_ed25519"
  install -d -m 700 "$ROOT/root/.ssh"
  install -m 600 "$WORK/out/id_ed25519.pub" "$ROOT/root/.ssh/authorized_keys"
  cat >"$ROOT/etc/ssh/sshd_config.d/gpunode-lab.conf" <<'EOF'
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
EOF
  passwd -R "$ROOT" -l root >/dev/null
}

configure_units() {
  local unit
  mount -t proc proc "$ROOT/proc"
  chroot "$ROOT" systemctl enable -q systemd-networkd ssh
  for unit in "${MASKED_UNITS[@]}"; do
    ln -sf /dev/null "$ROOT/etc/systemd/system/$unit"
  done
  chroot "$ROOT" apt-get clean
  umount "$ROOT/proc"
  rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/log/*.log
}

write_firstboot() {
  # Runs once as PID 1 (init=) in the build boot: installs GRUB into the MBR and writes
  # grub.cfg with the guest's own update-grub, then powers off.
  cat >"$ROOT/usr/local/sbin/lab-firstboot" <<'EOF'
#!/bin/sh
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sys /sys
mountpoint -q /dev || mount -t devtmpfs dev /dev
mountpoint -q /run || mount -t tmpfs run /run
mount -o remount,rw /
if grub-install --target=i386-pc /dev/vda && update-grub; then
  echo LAB-FIRSTBOOT-OK
else
  echo LAB-FIRSTBOOT-FAILED
fi
rm -f /usr/local/sbin/lab-firstboot
sync
mount -o remount,ro / || true
echo o >/proc/sysrq-trigger
sleep 30
EOF
  chmod 755 "$ROOT/usr/local/sbin/lab-firstboot"
}

make_probe_initrd() {
  local p=$WORK/probe
  mkdir -p "$p/bin"
  cp "$ROOT/bin/busybox" "$p/bin/busybox"
  printf '#!/bin/busybox sh\n/bin/busybox echo GPUNODE-LAB-PROBE-USERSPACE-OK\n%s\n' \
    '/bin/busybox poweroff -f' >"$p/init"
  chmod 755 "$p/init"
  (cd "$p" && find . | cpio -o -H newc --quiet | gzip -1) >"$WORK/out/probe-initrd.gz"
  cp "$ROOT"/boot/vmlinuz-* "$WORK/out/vmlinuz"
}

make_raw_disk() {
  local uuid=$1
  truncate -s "${DISK_MB}M" "$RAW"
  printf 'label: dos\nstart=2048, type=83, bootable\n' | sfdisk -q "$RAW"
  mkfs.ext4 -q -F -L lab-root -U "$uuid" -E offset=1048576 -d "$ROOT" "$RAW" \
    "$((DISK_MB - 1))M"
}

firstboot() {
  local kernel initrd
  kernel=$(ls "$ROOT"/boot/vmlinuz-*)
  initrd=$(ls "$ROOT"/boot/initrd.img-*)
  log "build boot (TCG): grub-install + update-grub in the guest"
  timeout 900 qemu-system-x86_64 -accel tcg,thread=multi -machine q35 -cpu max -m 1024 -smp 2 \
    -nodefaults -display none -no-reboot -serial "file:$WORK/firstboot.log" \
    -drive "file=$RAW,format=raw,if=none,id=disk0,cache=unsafe" \
    -device virtio-blk-pci,drive=disk0 \
    -kernel "$kernel" -initrd "$initrd" \
    -append "root=/dev/vda1 rw console=ttyS0,115200 panic=1 init=/usr/local/sbin/lab-firstboot" \
    >"$WORK/firstboot.qemu.log" 2>&1 || true
  grep -q LAB-FIRSTBOOT-OK "$WORK/firstboot.log" \
    || { tail -n 60 "$WORK/firstboot.log" "$WORK/firstboot.qemu.log"; die "build boot failed"; }
}

to_qcow2() {
  qemu-img convert -c -O qcow2 -o compression_type=zstd "$RAW" "$WORK/out/base.qcow2" 2>/dev/null \
    || qemu-img convert -c -O qcow2 "$RAW" "$WORK/out/base.qcow2"
}

write_build_json() {
  local kernel_ver rootfs_mb raw_mb qcow_mb debs
  kernel_ver=$(basename "$(ls "$ROOT"/boot/vmlinuz-*)" | sed 's/^vmlinuz-//')
  rootfs_mb=$(du -sm --one-file-system "$ROOT" | cut -f1)
  raw_mb=$(( $(du -k "$RAW" | cut -f1) / 1024 ))
  qcow_mb=$(( $(stat -c %s "$WORK/out/base.qcow2") / 1048576 ))
  debs=$(chroot "$ROOT" dpkg-query -W -f '.' | wc -c)
  cat >"$WORK/out/build.json" <<EOF
{
  "suite": "$SUITE",
  "kernel": "$kernel_ver",
  "packages_installed": $debs,
  "disk_mb": $DISK_MB,
  "rootfs_mb": $rootfs_mb,
  "raw_used_mb": $raw_mb,
  "base_qcow2_mb": $qcow_mb,
  "seconds": {"deps": ${TIMES[deps]}, "debootstrap": ${TIMES[debootstrap]},
              "configure": ${TIMES[configure]}, "disk": ${TIMES[disk]},
              "firstboot": ${TIMES[firstboot]}, "qcow2": ${TIMES[qcow2]}, "total": $SECONDS}
}
EOF
}

mkdir -p "$WORK/out"
debootstrap_rootfs
phase_done debootstrap

UUID=$(cat /proc/sys/kernel/random/uuid)
write_guest_files "$UUID"
write_ssh_files
configure_units
write_firstboot
make_probe_initrd
phase_done configure

make_raw_disk "$UUID"
phase_done disk

firstboot
phase_done firstboot

to_qcow2
phase_done qcow2

write_build_json
mkdir -p "$(dirname "$OUT")"
mv "$WORK/out" "$OUT"
log "image ready in $OUT ($(cat "$OUT/build.json" | tr -d '\n ' ))"

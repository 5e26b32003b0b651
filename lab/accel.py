"""TCG or KVM: decided by a real probe boot, never by /dev/kvm merely existing.

On the machines this project runs on, /dev/kvm exists yet a KVM guest hangs in early boot (no
kernel output after "Probing EDD"; see lab/README.md). So TCG is the default, and KVM is used
only when a short probe boot of the lab's own kernel under KVM reaches userspace. The answer is
cached per host kernel and QEMU version; GPUNODE_LAB_ACCEL=tcg|kvm|auto overrides.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path

from lab.image import LabImage, cache_dir

ACCEL_ENV = "GPUNODE_LAB_ACCEL"
PROBE_MARKER = "GPUNODE-LAB-PROBE-USERSPACE-OK"
PROBE_TIMEOUT_S = 20.0


def choose_accel(image: LabImage, requested: str | None = None) -> str:
    """Return "kvm" or "tcg" for `requested` (tcg, kvm, auto; default $GPUNODE_LAB_ACCEL/auto)."""
    requested = requested or os.environ.get(ACCEL_ENV, "auto")
    if requested in ("tcg", "kvm"):
        return requested
    if requested != "auto":
        raise ValueError(f"accel must be tcg, kvm or auto, not {requested!r}")
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg"
    key = _probe_key()
    cached = _read_cache()
    if cached.get("key") == key:
        return "kvm" if cached.get("kvm_ok") else "tcg"
    started = time.monotonic()
    ok = probe_kvm(image)
    _write_cache({"key": key, "kvm_ok": ok, "probe_s": round(time.monotonic() - started, 1)})
    return "kvm" if ok else "tcg"


def probe_kvm(image: LabImage, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Boot the lab kernel with a busybox initramfs under KVM; True if userspace printed."""
    args = [
        "qemu-system-x86_64", "-accel", "kvm", "-machine", "q35", "-cpu", "max",
        "-m", "256", "-smp", "1", "-nodefaults", "-display", "none", "-no-reboot",
        "-serial", "stdio", "-kernel", str(image.kernel), "-initrd", str(image.probe_initrd),
        "-append", "console=ttyS0 panic=-1 quiet",
    ]  # fmt: skip
    try:
        proc = subprocess.run(
            args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return False
    return PROBE_MARKER in proc.stdout


def _probe_key() -> str:
    version = subprocess.run(
        ["qemu-system-x86_64", "-version"], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    return f"{platform.release()}|{version[0] if version else '?'}"


def _cache_file() -> Path:
    return cache_dir() / "accel.json"


def _read_cache() -> dict:
    try:
        return json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}


def _write_cache(data: dict) -> None:
    _cache_file().parent.mkdir(parents=True, exist_ok=True)
    _cache_file().write_text(json.dumps(data) + "\n")

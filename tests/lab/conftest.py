"""Lab tier fixtures: a real Debian 13 or 12 guest under QEMU (lab/vm.py; GPUNODE_LAB_SUITE).

`lab_vm` (session scope) builds or reuses the cached image, boots a fresh overlay in its own run
dir, waits for SSH and yields the LabVM; GPUNODE_LAB_RUN_DIR points at that run dir meanwhile,
so inventories/lab.py (and pyinfra run from these tests) finds this VM. Tests are skipped only
when QEMU cannot run at all here. GPUNODE_LAB_REUSE=1 uses a VM already started with
`python -m lab up` instead (faster iteration; it is left running).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.image import LabImageError, cache_dir, ensure_host_tools, ensure_image
from lab.progress import Heartbeat
from lab.vm import RUN_DIR_ENV, LabNotRunning, LabVM

BOOT_TIMEOUT_S = 600.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/lab is a lab test."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.lab)


_BEATS: dict[str, Heartbeat] = {}


class _Uncaptured:
    """stderr with pytest's capture suspended for each write: a heartbeat reaches the
    terminal (or CI log) while the test's own output is captured."""

    def __init__(self, config: pytest.Config) -> None:
        self.capman = config.pluginmanager.getplugin("capturemanager")

    def write(self, text: str) -> None:
        with self.capman.global_and_fixture_disabled():
            sys.__stderr__.write(text)
            sys.__stderr__.flush()

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def pytest_configure(config: pytest.Config) -> None:
    global _STREAM
    _STREAM = _Uncaptured(config)


_STREAM: _Uncaptured | None = None


def pytest_runtest_logstart(nodeid: str, location: tuple) -> None:
    """A lab test runs for minutes: say which, and keep saying it while it is silent."""
    if "tests/lab/" not in nodeid or _STREAM is None:
        return
    name = nodeid.split("/")[-1]
    beat = Heartbeat(f"[lab] {name}", every=30.0, stream=_STREAM)  # type: ignore[arg-type]
    _BEATS[nodeid] = beat.__enter__()


def pytest_runtest_logfinish(nodeid: str, location: tuple) -> None:
    beat = _BEATS.pop(nodeid, None)
    if beat is not None:
        beat.__exit__(None, None, None)


def qemu_unavailable_reason() -> str | None:
    """Why QEMU cannot run here at all (None when it can): tools missing and not installable,
    or QEMU failing to start even a bare q35 machine."""
    try:
        ensure_host_tools()
    except LabImageError as exc:
        return f"QEMU is not available and could not be installed: {exc}"
    probe = [
        "qemu-system-x86_64", "-machine", "q35", "-accel", "tcg", "-nodefaults",
        "-display", "none", "-S", "-monitor", "stdio",
    ]  # fmt: skip
    try:
        proc = subprocess.run(probe, input="quit\n", capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"QEMU cannot run here: {exc}"
    if proc.returncode != 0:
        return f"QEMU cannot run here: {proc.stderr.strip()[-500:]}"
    return None


def _skip(reason: str) -> None:
    sys.__stderr__.write(f"\nlab tests skipped: {reason}\n")
    pytest.skip(reason)


def _running_vm() -> LabVM | None:
    try:
        return LabVM.attach()
    except LabNotRunning:
        return None


@pytest.fixture(scope="session")
def lab_vm() -> Iterator[LabVM]:
    """The booted lab VM, reachable over SSH as root with the pinned host key."""
    reused = _running_vm() if os.environ.get("GPUNODE_LAB_REUSE") == "1" else None
    if reused is not None:
        yield reused
        return
    reason = qemu_unavailable_reason()
    if reason:
        _skip(reason)
    started = time.monotonic()
    # A run dir of its own: two test sessions (or a session and `python -m lab up`) never
    # stop each other's guest. The image first: on a fresh machine it makes the cache folder.
    image = ensure_image()
    cache_dir().mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="run-pytest-", dir=cache_dir()))
    vm = LabVM(run_dir, image)
    old_run_dir = os.environ.get(RUN_DIR_ENV)
    os.environ[RUN_DIR_ENV] = str(vm.run_dir)
    try:
        vm.start()
        vm.wait_ssh(timeout=BOOT_TIMEOUT_S)
        sys.__stderr__.write(f"\nlab VM up in {time.monotonic() - started:.0f} s\n")
        yield vm
    finally:
        vm.stop()
        shutil.rmtree(run_dir, ignore_errors=True)
        if old_run_dir is None:
            os.environ.pop(RUN_DIR_ENV, None)
        else:
            os.environ[RUN_DIR_ENV] = old_run_dir

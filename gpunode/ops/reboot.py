"""Reboot and wait for the host: pyinfra's server.reboot, with gpunode's own wait.

pyinfra 3.10's wait (``wait_and_reconnect``) has two faults gpunode can't leave in a deploy:
- it takes the host as rebooted only when its uptime after the reconnect is below its uptime
  before the reboot plus ``delay``; a host that takes longer to boot than it had been up (a
  node rebooted soon after its last boot, a slow boot) is never taken as rebooted: it waits,
  connected, until it gives up;
- its ``reboot_timeout`` is a number of attempts (timeout / interval), not a time: each attempt
  adds its own connect time (up to paramiko's banner and auth timeouts) or its uptime read, so
  the run waits well past the timeout.
gpunode's wait reads the kernel's boot id before the reboot and takes a different one as the
proof; the timeout is a deadline (gevent.Timeout: pyinfra's CLI runs on gevent); the old
connection is closed before each attempt (pyinfra's SSH disconnect leaves it open).

While the host is down, every reconnect attempt makes paramiko log "Error reading SSH protocol
banner" with a traceback (its transport thread logs to the `paramiko.transport` logger, which
nothing configures, so Python's last-resort handler prints it). During the wait that logger is
silenced, and one line every WAIT_LINE_S seconds says how long the host has been away. A host
that does not come back fails the run with one line naming the host, the timeout and the fix.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gevent  # type: ignore[import-untyped]
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, operation
from pyinfra.operations import server

from gpunode.facts.boot import BootId
from gpunode.facts.boot_modules import boot_module_problem
from gpunode.facts.snapshot import node, node_changed
from gpunode.pyinfra_adapter import drop_connection, inner_commands

WAIT_LINE_S = 15.0
QUIET_LOGGERS = ("paramiko.transport", "paramiko")
#: pyinfra's server.reboot commands gpunode replaces (by function name; pinned by a unit test)
PYINFRA_UPTIME = "capture_uptime"
PYINFRA_WAIT = "wait_and_reconnect"


class RebootDeadline(Exception):
    """The reboot_timeout passed before the host came back."""


@contextmanager
def quiet_loggers(names: tuple[str, ...] = QUIET_LOGGERS) -> Iterator[None]:
    """Silence these loggers (levels restored after)."""
    saved = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def timeout_message(host_name: str, timeout: int) -> str:
    """The error of a host that did not come back."""
    return (f"{host_name}: did not reboot in time: no SSH login within {timeout} s of the "
            "reboot. Fix: look at its console (a kernel that does not boot, a changed host "
            "key, sshd not starting); if it only boots slowly, raise gpunode.reboot_timeout")


def _ticker(host_name: str, timeout: int, started: float, stop: threading.Event) -> None:
    while not stop.wait(WAIT_LINE_S):  # pyinfra's CLI runs threads as gevent greenlets
        away = time.monotonic() - started
        logger.info(f"{host_name}: rebooting: waiting for SSH ({away:.0f} s of {timeout} s)")


def record_boot_id(state: Any, host: Any, boot_ids: list[str]) -> bool:
    """Keep the boot id before the reboot (in boot_ids, shared with the wait)."""
    boot_ids.append(host.get_fact(BootId))
    return True


def rebooted(host: Any, old_id: str) -> bool:
    """One attempt: close the old connection, connect, and compare the boot id."""
    drop_connection(host)
    host.connect(show_errors=False)
    if not host.connected:
        return False
    new_id = host.get_fact(BootId)
    return bool(new_id) and new_id != old_id


def wait_until_rebooted(host: Any, old_id: str, delay: float, interval: float,
                        deadline: float) -> None:
    """Attempt every interval seconds until the boot id changed; RebootDeadline at deadline."""
    time.sleep(delay)
    while not rebooted(host, old_id):
        left = deadline - time.monotonic()
        if left <= 0:
            raise RebootDeadline
        time.sleep(min(interval, left))


def readable_wait(state: Any, host: Any, boot_ids: list[str], delay: float, interval: float,
                  timeout: int) -> bool:
    """Wait quietly, with a progress line, until the host runs a new boot; False (and the host
    named in an error) when it did not within timeout seconds."""
    started = time.monotonic()
    logger.info(f"{host.name}: rebooting: waiting for SSH (up to {timeout} s)")
    stop = threading.Event()
    ticker = threading.Thread(target=_ticker, args=(host.name, timeout, started, stop),
                              daemon=True)
    ticker.start()
    old_id = boot_ids[0] if boot_ids else ""
    try:
        with quiet_loggers(), gevent.Timeout(timeout, RebootDeadline):
            wait_until_rebooted(host, old_id, delay, interval, started + timeout)
    except RebootDeadline:
        host.log_styled(timeout_message(host.name, timeout), fg="red", log_func=logger.error)
        return False
    finally:
        stop.set()
    logger.info(f"{host.name}: back after the reboot ({time.monotonic() - started:.0f} s)")
    return True


def next_kernel(pinned: str | None) -> str | None:
    """The kernel a reboot starts: the pin, else the newest installed (GRUB's default entry
    and an unpinned Proxmox boot), else the running one."""
    kernels = node().kernels
    if pinned:
        return pinned
    return (kernels.newest or kernels.running or None) if kernels else None


def gpu_reboot_refusal(pinned: str | None) -> str | None:
    """Why a reboot would lose the NVIDIA driver (the next kernel lacks its module, or on
    Proxmox its headers); None when no NVIDIA driver is in use or the kernel has both."""
    snapshot = node()
    in_use = snapshot.driver_loaded is not None or bool(snapshot.nvidia and
                                                        snapshot.nvidia.present)
    version = next_kernel(pinned)
    if not in_use or snapshot.boot_modules is None or not version:
        return None
    proxmox = bool((snapshot.pve and snapshot.pve.present)
                   or (snapshot.boot_tool and snapshot.boot_tool.status.present))
    return boot_module_problem(version, snapshot.boot_modules, proxmox)


@operation(is_idempotent=False)
def reboot(reboot_timeout: int = 300, delay: int = 5, interval: int = 3,
           keep_gpu: bool = False, boot_kernel: str | None = None):
    """
    Reboot the host and wait until it is back (pyinfra's server.reboot, gpunode's wait).

    + reboot_timeout: seconds to wait for the host to run a new boot and answer SSH
    + delay: seconds before the first reconnect attempt
    + interval: seconds between reconnect attempts
    + keep_gpu: refuse (and do nothing) when the kernel the reboot starts has no NVIDIA module
      while an NVIDIA driver is in use (gpu_reboot_refusal)
    + boot_kernel: the kernel the reboot starts (a pin); None: the newest installed
    """
    refusal = gpu_reboot_refusal(boot_kernel) if keep_gpu else None
    if refusal:
        host.log_styled(f"{host.name}: reboot refused: the next boot would have no NVIDIA "
                        f"driver: {refusal}", fg="red", log_func=logger.error)
        host.noop(f"reboot refused: {refusal.split('. Fix:')[0]}")
        return
    boot_ids: list[str] = []
    yield FunctionCommand(record_boot_id, (boot_ids,), {})
    inner = inner_commands(server.reboot, delay=delay, interval=interval,
                           reboot_timeout=reboot_timeout)
    for command in inner:
        name = getattr(getattr(command, "function", None), "__name__", "")
        if isinstance(command, FunctionCommand) and name == PYINFRA_UPTIME:
            continue
        if isinstance(command, FunctionCommand) and name == PYINFRA_WAIT:
            yield FunctionCommand(readable_wait,
                                  (boot_ids, delay, interval, reboot_timeout), {})
        else:
            yield command
    yield node_changed()  # a new boot: the next read of the node is a new snapshot

"""Reboot and wait for the host: pyinfra's server.reboot, with a wait a person can read.

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pyinfra import logger
from pyinfra.api import FunctionCommand, operation
from pyinfra.operations import server

from gpunode.roles.pyinfra_adapter import inner_commands

WAIT_LINE_S = 15.0
QUIET_LOGGERS = ("paramiko.transport", "paramiko")


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


def readable_wait(state, host, wait: Callable, timeout: int) -> bool:
    """Run pyinfra's wait_and_reconnect quietly with a progress line; False on timeout."""
    started = time.monotonic()
    logger.info(f"{host.name}: rebooting: waiting for SSH (up to {timeout} s)")
    stop = threading.Event()
    ticker = threading.Thread(target=_ticker, args=(host.name, timeout, started, stop),
                              daemon=True)
    ticker.start()
    try:
        with quiet_loggers():
            wait(state, host)
    except Exception as exc:  # pyinfra raises a bare Exception on its timeout
        if "did not reboot in time" not in str(exc):
            raise
        host.log_styled(timeout_message(host.name, timeout), fg="red", log_func=logger.error)
        return False
    finally:
        stop.set()
    logger.info(f"{host.name}: back after the reboot ({time.monotonic() - started:.0f} s)")
    return True


@operation(is_idempotent=False)
def reboot(reboot_timeout: int = 300, delay: int = 5, interval: int = 3):
    """
    Reboot the host and wait until it is back (pyinfra's server.reboot, readable wait).

    + reboot_timeout: seconds to wait for the host to answer SSH again
    + delay: seconds before the first reconnect attempt
    + interval: seconds between reconnect attempts
    """
    inner = inner_commands(server.reboot, delay=delay, interval=interval,
                           reboot_timeout=reboot_timeout)
    for command in inner:
        if isinstance(command, FunctionCommand) and getattr(
            command.function, "__name__", ""
        ) == "wait_and_reconnect":
            yield FunctionCommand(readable_wait, (command.function, reboot_timeout), {})
        else:
            yield command

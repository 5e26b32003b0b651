"""systemd units gpunode installs: enabled and active, as the snapshot read them."""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra import host, logger
from pyinfra.api import StringCommand, operation

from gpunode.facts.node_read import SYSTEMD_RUNTIME
from gpunode.facts.snapshot import node
from gpunode.ops.changes import log_wrapped, report_change
from gpunode.ops.files import owned_file, render_template, sha1_text

DAEMON_RELOAD = "systemctl daemon-reload"


def systemd_booted() -> bool:
    """sd_booted(): /run/systemd/system exists only when systemd is PID 1."""
    return node().folder_exists(SYSTEMD_RUNTIME)


@operation()
def unit_disabled(unit: str):
    """
    Stop and disable a unit (`systemctl disable --now`) unless it already is neither.

    + unit: full unit name (gpunode-tune.service)
    """
    if not systemd_booted():
        host.noop(f"not booted with systemd: {unit} can't be running")
        return
    active, enabled = node().unit(unit).active, node().unit(unit).enabled
    if not active and not enabled:
        host.noop(f"{unit} is disabled and inactive")
        return
    state = f"{'enabled' if enabled else 'disabled'}, {'active' if active else 'inactive'}"
    report_change(unit, state, "disabled, inactive", where="systemd")
    yield StringCommand("systemctl", "disable", "--now", unit)


@operation()
def unit_enabled_and_running(unit: str, reloaded: bool = False):
    """
    Enable and start a unit unless it already is, in one command.

    The state comes from the snapshot (pyinfra's SystemdStatus and SystemdEnabled parsers
    over one systemctl show), so a converged unit costs no read of its own (pyinfra's
    systemd.service would read both again).

    + unit: full unit name (gpunode-tune.service)
    + reloaded: systemd re-read its units after the unit's files in this run (a
      daemon-reload after the memlock drop-in), so `enable` skips its own reload (--no-reload,
      ~1.7 s on the lab guest)
    """
    active, enabled = node().unit(unit).active, node().unit(unit).enabled
    if active and enabled:
        host.noop(f"{unit} is enabled and active")
        return
    state = f"{'enabled' if enabled else 'disabled'}, {'active' if active else 'inactive'}"
    report_change(unit, state, "enabled, active", where="systemd")
    quoted = shlex.quote(unit)
    if not enabled:
        no_reload = "--no-reload " if reloaded else ""
        yield StringCommand(f"systemctl enable {no_reload}{'--now ' if not active else ''}{quoted}")
    else:
        yield StringCommand(f"systemctl start {quoted}")


def unit_files(unit: str, files: list[tuple[str, str, dict[str, Any]]],
               reload_follows: bool = False) -> None:
    """Write the files (template, dest, variables) behind a unit gpunode enables, with one
    reload of systemd for all of them (~1.7 s each on the lab guest): none when the unit is
    not enabled yet, as the `systemctl enable` that follows reloads systemd itself (unless
    --no-reload), else a daemon-reload after the last file whose text changes. Planned from
    the snapshot, like the writes themselves. None either when a daemon-reload follows in
    this run (reload_follows: the memlock drop-in's): it re-reads every unit."""
    texts = [(dest, render_template(template, **variables)) for template, dest, variables
             in files]
    changing = [dest for dest, text in texts
                if (state := node().file(dest)) is None or state.sha1 != sha1_text(text)]
    reloaded_by_enable = systemd_booted() and not node().unit(unit).enabled
    last = None if reloaded_by_enable or reload_follows or not changing else changing[-1]
    for dest, text in texts:
        owned_file(name=f"Write {dest}", dest=dest, text=text,
                   after=DAEMON_RELOAD if dest == last else None)


def unit_enabled_at_boot(unit: str, why: str, reloaded: bool = False) -> None:
    """Add the operation that enables and starts a unit gpunode wrote (reloaded: a
    daemon-reload of this run already re-read it); on a host not booted with systemd, say
    the unit is written and not enabled instead."""
    if systemd_booted():
        unit_enabled_and_running(name=f"Enable {unit} ({why})", unit=unit, reloaded=reloaded)
    else:
        log_wrapped(logger.warning,
                    f"{host.name}: not booted with systemd; {unit} written, not enabled")

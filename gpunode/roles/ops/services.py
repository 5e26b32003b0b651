"""systemd units gpunode installs: enabled and active, read with the cached facts."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus
from pyinfra.operations import systemd

from gpunode.roles.facts.cache import cached_fact
from gpunode.roles.ops.changes import report_change
from gpunode.roles.pyinfra_adapter import inner_commands


@operation()
def unit_enabled_and_running(unit: str):
    """
    Enable and start a unit (pyinfra's systemd.service does it) unless it already is.

    The state comes from pyinfra's SystemdStatus and SystemdEnabled facts read through
    the cache (prefetchable), so a converged unit costs no read of its own.

    + unit: full unit name (gpunode-tune.service)
    """
    active = (cached_fact(SystemdStatus, services=[unit]) or {}).get(unit, False)
    enabled = (cached_fact(SystemdEnabled, services=[unit]) or {}).get(unit, False)
    if active and enabled:
        host.noop(f"{unit} is enabled and active")
        return
    state = f"{'enabled' if enabled else 'disabled'}, {'active' if active else 'inactive'}"
    report_change(unit, state, "enabled, active", where="systemd")
    yield from inner_commands(systemd.service, service=unit, running=True, enabled=True)

"""Runtime sysctl values, read in the run's snapshot, written in one command and each write
read back.

pyinfra's server.sysctl reads one key per fact command and fails on keys the running kernel
lacks; this operation plans from the snapshot (every key in its one read), skips missing ones
with a note, writes
every differing key in one remote shell (each write with its own read-back and message), and
leaves persistence to the sysctl.d file that host_tuning owns whole.

A write is confirmed by reading /proc/sys back, never by sysctl's exit status: kernel 6.12
prints "Operation not permitted" for kernel.nmi_watchdog without perf counters and exits 0.
A best-effort key the kernel keeps at another value is recorded under SYSCTL_REFUSED_DIR and
not written again in this boot ("not supported here"); any other key fails the operation.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyinfra import host
from pyinfra.api import operation

from gpunode.facts.kernel_params import (
    SYSCTL_REFUSED_DIR,
    normalize_sysctl_value,
    sysctl_path,
)
from gpunode.facts.snapshot import node
from gpunode.ops.changes import report_change, shorten
from gpunode.ops.shell import every_command, script_text


def sysctl_changes(
    live: dict[str, str], wanted: dict[str, str], refused: dict[str, str] | None = None
) -> dict[str, str]:
    """Wanted keys present on this kernel whose live value differs (and whose write of that
    value was not already refused in this boot)."""
    refused = refused or {}
    return {
        key: value
        for key, value in wanted.items()
        if key in live
        and live[key] != normalize_sysctl_value(value)
        and refused.get(key) != normalize_sysctl_value(value)
    }


def absent_sysctls(values: dict[str, str], allowed: Iterable[str]) -> tuple[list[str], list[str]]:
    """(keys refused, keys only noted): wanted keys this host's /proc/sys lacks (the snapshot's
    read), refused unless `allowed` lists them (allow_absent, the defaults)."""
    live = node().kernel.sysctls
    missing = sorted(key for key in values if key not in live)
    allowed = set(allowed)
    return [k for k in missing if k not in allowed], [k for k in missing if k in allowed]


def write_and_verify_command(key: str, value: str, best_effort: bool) -> str:
    """`sysctl -w`, then read /proc/sys back; a value the kernel kept is an error, or for a
    best-effort key a note and a record under SYSCTL_REFUSED_DIR
    (templates/shell/sysctl-write.sh.j2, every value quoted)."""
    return script_text(
        "sysctl-write.sh.j2",
        key=key,
        want=normalize_sysctl_value(value),
        path=sysctl_path(key),
        best_effort=best_effort,
        refused_dir=SYSCTL_REFUSED_DIR,
        record=f"{SYSCTL_REFUSED_DIR}/{key}",
    )


@operation()
def sysctl_values(values: dict[str, str], best_effort: frozenset[str] = frozenset(),
                  persisted_in: str | None = None):
    """
    Set sysctl values at runtime (`sysctl -w`), only where the live value differs.

    + values: key -> value ("4096 87380 134217728" for multi-value keys)
    + best_effort: keys whose write the kernel may refuse (a failure there is not an error)
    + persisted_in: the file that persists them (named in the change line)
    """
    state = node().kernel
    live = state.sysctls
    missing = sorted(key for key in values if key not in live)
    refused = {k: v for k, v in state.sysctl_refused.items() if k in best_effort}
    changes = sysctl_changes(live, values, refused)
    where = f"runtime; persisted in {persisted_in}" if persisted_in else "runtime"
    # Every line before the first command: change detection stops at the first one.
    for key, value in changes.items():
        report_change(key, shorten(live[key]), shorten(normalize_sysctl_value(value)), where)
    if changes:
        yield every_command([write_and_verify_command(key, value, key in best_effort)
                             for key, value in changes.items()])
    else:
        notes = [f"not on this kernel: {', '.join(missing)}"] if missing else []
        notes += [f"kernel refused {k}={v} in this boot (not supported here)"
                  for k, v in sorted(refused.items()) if live.get(k) != v]
        host.noop("sysctl values already set" + "".join(f"; {n}" for n in notes))

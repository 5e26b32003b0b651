"""Runtime sysctl values, read from one fact call for all keys.

pyinfra's server.sysctl reads one key per fact command and fails on keys the running kernel
lacks; this operation reads every key in one command, skips missing ones with a note, and
leaves persistence to the sysctl.d file that host_tuning owns whole.
"""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import StringCommand, operation

from gpunode.roles.facts.cache import cached_fact
from gpunode.roles.facts.kernel_params import (
    KernelParams,
    KernelParamsState,
    normalize_sysctl_value,
)
from gpunode.roles.facts.sections import as_model


def sysctl_changes(live: dict[str, str], wanted: dict[str, str]) -> dict[str, str]:
    """Wanted keys present on this kernel whose live value differs."""
    return {
        key: value
        for key, value in wanted.items()
        if key in live and live[key] != normalize_sysctl_value(value)
    }


@operation()
def sysctl_values(values: dict[str, str], best_effort: frozenset[str] = frozenset()):
    """
    Set sysctl values at runtime (`sysctl -w`), only where the live value differs.

    + values: key -> value ("4096 87380 134217728" for multi-value keys)
    + best_effort: keys whose write the kernel may refuse (a failure there is not an error)
    """
    live = as_model(KernelParamsState, cached_fact(KernelParams, sysctl_keys=sorted(values),
                                                     modules=[])).sysctls
    missing = sorted(key for key in values if key not in live)
    changes = sysctl_changes(live, values)
    for key, value in changes.items():
        command = f"sysctl -w {shlex.quote(f'{key}={normalize_sysctl_value(value)}')}"
        if key in best_effort:
            command += f" || echo 'gpunode: kernel refused {key} (not supported here)' >&2"
        yield StringCommand(command)
    if not changes:
        note = f"; not on this kernel: {', '.join(missing)}" if missing else ""
        host.noop(f"sysctl values already set{note}")

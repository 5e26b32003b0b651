"""apt: packages present (pyinfra's apt.packages for what is missing), holds (kernel pin,
NVIDIA driver pin) and `apt-get update` whose signature failures are reported with the
repository and the fix (gpunode.facts.apt_sources), not as apt's raw text."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from pyinfra import host, logger
from pyinfra.api import OperationError, StringCommand, operation

from gpunode.facts.apt_sources import (
    APT_UPDATE_LOG,
    APT_UPDATE_RC_MARKER,
    AptSource,
    AptSources,
    AptUpdateLog,
    AptUpdateResult,
    signature_problem_message,
)
from gpunode.facts.sections import as_model, as_models
from gpunode.facts.snapshot import node, node_changed
from gpunode.ops.changes import log_wrapped, report_change
from gpunode.ops.shell import argv, argv_text
from gpunode.pyinfra_adapter import is_executing


def apt_install_command(packages: list[str]) -> str:
    """pyinfra's apt.packages install command (noninteractive, changed config files kept)."""
    return ('DEBIAN_FRONTEND=noninteractive apt-get -y -o Dpkg::Options::="--force-confdef" '
            '-o Dpkg::Options::="--force-confold" install ' + argv_text(*packages))


APT_UPDATE_COMMAND = (
    f"mkdir -p /run/gpunode && {{ apt-get update -q; echo \"{APT_UPDATE_RC_MARKER}$?\"; }} "
    f"> {APT_UPDATE_LOG} 2>&1; cat {APT_UPDATE_LOG}"
)


def update_messages(host_name: str, result: AptUpdateResult,
                    sources: list | None = None) -> tuple[list[str], list[str]]:
    """(errors, warnings) of one apt-get update: a rejected signature is an error naming the
    repository, its file and the fix; a failure nothing explains keeps apt's last lines."""
    errors = [signature_problem_message(host_name, p, sources) for p in result.problems
              if p.fatal]
    warnings = [signature_problem_message(host_name, p, sources) for p in result.problems
                if not p.fatal]
    if result.rc not in (0, None) and not errors:
        errors.append(f"{host_name}: apt-get update failed (exit {result.rc}): "
                      + " / ".join(result.tail or ["no output"]))
    return errors, warnings


def checked_apt_update() -> Generator[Any, None, list[str]]:
    """Yield `apt-get update` (its output kept in APT_UPDATE_LOG), then read the log back:
    warnings are logged, and the errors returned (empty on --dry: nothing ran)."""
    yield StringCommand(APT_UPDATE_COMMAND)
    if not is_executing():
        return []
    result = as_model(AptUpdateResult, host.get_fact(AptUpdateLog))
    sources = as_models(AptSource, host.get_fact(AptSources)) if result.problems else []
    errors, warnings = update_messages(host.name, result, sources)
    for warning in warnings:
        log_wrapped(logger.warning, warning)
    return errors


@operation(is_idempotent=False)
def apt_update():
    """
    `apt-get update`; a repository whose signature apt rejects (apt 3's sqv policy, a missing
    or expired key) fails the operation with the repository, the file that defines it and
    the fix; a warning (a key apt 3 will reject) is logged.
    """
    errors = yield from checked_apt_update()
    if errors:
        raise OperationError("\n".join(errors))


@operation()
def packages_present(packages: list[str]):
    """
    Install the packages that are not installed, with the command pyinfra's apt.packages
    runs (noninteractive, keeping changed config files).

    The installed set comes from the snapshot's one dpkg-query of the packages the run
    needs, instead of apt.packages' read of every package on the node (DebPackages), so a
    dry run on a node that lacks one reads nothing more. An install makes the snapshot
    stale: what the node reads next (lspci, modinfo ...) is read again.

    + packages: package names
    """
    installed = node().packages
    missing = [p for p in packages if p not in installed]
    if not missing:
        host.noop(f"{' '.join(packages)} installed")
        return
    for package in missing:
        report_change(f"package {package}", "not installed", "installed", where="apt")
    yield StringCommand(apt_install_command(missing))
    yield node_changed()  # an install changes what the node reads (lspci, modinfo, ...)


@operation()
def apt_hold(packages: list[str], held: bool = True):
    """
    Hold (or release) packages with apt-mark.

    + packages: package names
    + held: True to hold, False to release the hold
    """
    holds = set(node().holds)
    todo = [p for p in packages if (p in holds) != held]
    if todo:
        for package in todo:
            report_change(f"apt-mark {package}", "not held" if held else "held",
                          "held" if held else "not held")
        yield argv("apt-mark", "hold" if held else "unhold", *todo)
    else:
        host.noop(f"{' '.join(packages)} already {'held' if held else 'not held'}")

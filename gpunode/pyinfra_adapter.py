"""The pyinfra internals gpunode relies on, in one place (the bottom layer: imports no gpunode).

pyinfra's public API (``host``, ``state``, ``logger``, ``StringCommand``, ``FactBase``, the
operations) is used where it is needed; what reaches past it is here, each behaviour pinned by
tests/unit/test_pyinfra_adapter.py against the installed pyinfra (``pyinfra~=3.10`` in
pyproject.toml), so an upgrade that changes one fails there and not in a deploy:

- ``inner_commands``: the command generator behind a pyinfra operation (``op._inner``), to
  reuse pyinfra's own operation inside a gpunode operation (pyinfra refuses nested calls);
- ``is_executing`` / ``in_execute_stage``: whether the run is executing (``State.is_executing``,
  set by pyinfra's run_ops) or the CLI reached its execute stage (``State.current_stage``);
- ``operation_results``: what the operations finished so far did on a host (changed, unchanged,
  failed; ``state.get_op_order()``, ``state.ops[host]``, ``state.get_op_meta(op_hash).names``);
- ``current_state`` / ``run_store`` / ``stored``: the State of this run (``ctx_state``) and a
  dict kept on it, behind pyinfra's context proxy (``_get_module``);
- ``current_host`` / ``host_prefix``: the host an operation or deploy runs for (``ctx_host``)
  and the ``[name] `` prefix of its log lines (``Host.print_prefix``);
- ``fail_host``: mark a host failed before it gets an operation (``State.fail_hosts``; the
  other hosts go on, and the run exits 1);
- ``fail_run_for``: the run exits 1 because of a host that stays active (``State.failed_hosts``,
  which pyinfra_cli's exit reads): the audit's "not ready" verdict;
- ``diff_requested`` / ``color_diff``: ``--diff`` (``Config.DIFF``) and pyinfra's coloured
  unified diff (``pyinfra.operations.util.files.generate_color_diff``);
- ``checks_for_changes``: whether this run detects changes before executing (``--dry`` and
  the interactive run) or executes at once (``-y``) (``State.check_for_changes``);
- ``fit_cli_tables``: the pyinfra CLI's "Detected changes" and "Results" tables fitted to
  100 columns, and "no operations" instead of an empty table (``pyinfra_cli.prints.print_rows``,
  which both call; pyinfra 3.10 has no option for their width);
- ``drop_connection``: close a host's connection for good before a reconnect (pyinfra's
  ``clear_askpass_cache``, the SSH connector's paramiko ``client``, ``Host.disconnect``: the
  SSH connector's own ``disconnect`` leaves its client open);
- ``deploy``: pyinfra's ``@deploy``, typed as the function it wraps. pyinfra types a decorated
  deploy or operation as ``PyinfraOperation``, whose ``__call__`` puts its global arguments
  (``_sudo``, ...) before the function's own, so a positional call (``site_tuning(profile)``)
  does not type-check. gpunode's operations are called with keywords (``name=``, then their
  own), which pyinfra's typing checks as it is: they use pyinfra's ``@operation``.

At import, the installed pyinfra is checked against the range gpunode declares for it
(``pyinfra>=3.10,<3.11`` in pyproject.toml, read back from the installed package's metadata
with ``packaging``): another pyinfra stops with what is installed, what is wanted and the fix.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import textwrap
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from typing import Any, TypeVar, cast

from packaging.requirements import Requirement
from packaging.version import Version
from pyinfra import state as _state_proxy
from pyinfra.api import deploy as _pyinfra_deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.host import Host
from pyinfra.api.state import State, StateStage
from pyinfra.connectors.util import clear_askpass_cache
from pyinfra.context import ctx_host, ctx_state
from pyinfra.operations.util.files import generate_color_diff

__all__ = [
    "pyinfra_problem",
    "checks_for_changes",
    "color_diff",
    "current_host",
    "current_state",
    "deploy",
    "diff_requested",
    "drop_connection",
    "fail_host",
    "fail_run_for",
    "fit_cli_tables",
    "fitted_rows",
    "host_prefix",
    "in_execute_stage",
    "inner_commands",
    "is_executing",
    "operation_results",
    "run_store",
    "stored",
    "unproxied",
]

def pyinfra_problem(installed: str, requires: Sequence[str]) -> str | None:
    """Why this pyinfra can't run gpunode (None: it can): requires are gpunode's declared
    requirements (the package metadata's Requires-Dist lines)."""
    wanted = [Requirement(line) for line in requires]
    pins = [r.specifier for r in wanted if r.name == "pyinfra" and not r.marker]
    if not pins or Version(installed) in pins[0]:
        return None
    return (f"gpunode needs pyinfra {pins[0]} (it relies on pyinfra internals, "
            f"gpunode/pyinfra_adapter.py); pyinfra {installed} is installed. "
            f"Fix: pip install 'pyinfra{pins[0]}'")


def _check_pyinfra() -> None:
    try:
        requires = metadata.requires("gpunode") or []
    except metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
        return
    problem = pyinfra_problem(metadata.version("pyinfra"), requires)
    if problem:
        raise ImportError(problem)


_check_pyinfra()
F = TypeVar("F", bound=Callable[..., None])


def deploy(name: str) -> Callable[[F], F]:
    """pyinfra's ``@deploy(name)``; the decorated function keeps its own signature for the
    type checker (called with its own arguments, as gpunode's deploys call the roles)."""
    return cast(Callable[[F], F], _pyinfra_deploy(name))


def inner_commands(op: Callable[..., Any], **kwargs: Any) -> Iterator[Any]:
    """The commands pyinfra's operation ``op`` yields for kwargs on the current host, without
    adding an operation (to yield from inside a gpunode operation)."""
    yield from op._inner(**kwargs)  # type: ignore[attr-defined]


def is_executing() -> bool:
    """True while pyinfra runs the operations' commands (False in change detection, --dry,
    and with no pyinfra state at all)."""
    return bool(getattr(_state_proxy, "is_executing", False))


def in_execute_stage() -> bool:
    """True once the pyinfra CLI reached its execute stage (after change detection)."""
    return _state_proxy.current_stage >= StateStage.Execute


def checks_for_changes() -> bool:
    """True when the run detects changes first (--dry, the interactive run); False with -y,
    where each operation is evaluated only when it executes."""
    state = current_state()
    return bool(getattr(state, "check_for_changes", True)) if state is not None else True


def operation_results(state: Any, host: Any) -> tuple[list[str], int, list[str]]:
    """(changed operation names, unchanged count, failed names) of the operations finished on
    host so far, in deploy order; nothing when pyinfra can't say (no state, unknown shape)."""
    changed: list[str] = []
    failed: list[str] = []
    unchanged = 0
    try:
        order = state.get_op_order()
        host_ops = state.ops[host]
    except Exception:  # noqa: BLE001 - no state (tests) or an unknown shape: report nothing
        return changed, unchanged, failed
    for op_hash in order:
        data = host_ops.get(op_hash)
        if data is None or not data.operation_meta.is_complete():
            continue
        name = sorted(state.get_op_meta(op_hash).names or {"?"})[0]
        meta = data.operation_meta
        if not meta.did_succeed(_raise_if_not_complete=False):
            failed.append(name)
        elif meta.did_change():
            changed.append(name)
        else:
            unchanged += 1
    return changed, unchanged, failed


def current_state() -> State | None:
    """The State of the running deploy, or None outside one."""
    return ctx_state.get() if ctx_state.isset() else None


def unproxied(obj: object) -> object:
    """The object behind a pyinfra context proxy (plain objects pass through)."""
    get = getattr(obj, "_get_module", None)
    return get() if callable(get) else obj


def run_store(attribute: str) -> dict[str, Any]:
    """A dict kept on this run's State under attribute (created on first use): what one
    run computes once for both of pyinfra's evaluations of an operation."""
    real = unproxied(_state_proxy)
    store = getattr(real, attribute, None)
    if store is None:
        store = {}
        setattr(real, attribute, store)
    return store


def run_id() -> str:
    """This run's id, 8 hex digits chosen once per State (GPUNODE_RUN_ID sets it: tests, a
    log to match): it makes the run's temporary names and its node lock its own."""
    try:
        store = run_store("_gpunode_run")
    except (AttributeError, RuntimeError, TypeError):  # no State: a bare operation test
        store = _NO_STATE_RUN
    if "id" not in store:
        store["id"] = os.environ.get("GPUNODE_RUN_ID") or secrets.token_hex(4)
    return str(store["id"])


_NO_STATE_RUN: dict[str, Any] = {}
TERMINAL_WIDTH = 100
LOG_INDENT = 4  # pyinfra's CLI indents every line that is not a "-->" header
GAP = 2
MIN_FIRST = 24
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
Row = tuple[Callable[[str], Any], "Sequence[str] | str"]


def _visible(text: str) -> int:
    return len(_ANSI.sub("", text))


def _clip(text: str, width: int) -> str:
    plain = _ANSI.sub("", text)
    return plain if len(plain) <= width else plain[: width - 3] + "..."


def _is_empty(tables: Sequence[Row]) -> bool:
    """Only a header (and pyinfra's "Grand total" row): no operation in the table."""
    return not [r for r in tables[1:] if r[1] and r[1][0] != "Grand total"]


def _widths(tables: Sequence[Row], width: int) -> list[int]:
    """Each column's width: the widest cell; the others cut to their share when the first
    would get less than MIN_FIRST, the first (the names) what is left."""
    count = max(len(r[1]) for r in tables)
    widths = [max((_visible(r[1][i]) for r in tables if i < len(r[1])), default=0)
              for i in range(count)]
    if count > 1:
        share = max(8, (width - MIN_FIRST - GAP * (count - 1)) // (count - 1))
        widths[1:] = [min(w, share) for w in widths[1:]]
        widths[0] = max(min(widths[0], width - sum(widths[1:]) - GAP * (count - 1)), 8)
    return widths


def _row_lines(columns: Sequence[str], widths: list[int]) -> list[str]:
    """One table row: its cells padded to the widths, the first one's overflow on lines of
    its own (indented by 2)."""
    first = columns[0] if columns else ""
    wrapped = [first] if _visible(first) <= widths[0] else textwrap.wrap(
        _ANSI.sub("", first), widths[0], subsequent_indent="  ", break_on_hyphens=False)
    cells = [wrapped[0] + " " * (widths[0] - _visible(wrapped[0]))]
    for cell, wide in zip(columns[1:], widths[1:], strict=False):
        cell = cell if _visible(cell) <= wide else _clip(cell, wide)
        cells.append(cell + " " * (wide - _visible(cell)))
    return [(" " * GAP).join(cells).rstrip(), *wrapped[1:]]


def fitted_rows(rows: Sequence[Row], width: int = TERMINAL_WIDTH - LOG_INDENT) -> list[Row]:
    """pyinfra's table rows (header first; a str row passes as it is) as lines of at most
    width columns: columns two spaces apart, no trailing padding, the first column (the
    operation's name) wrapped onto lines of its own, indented by two, when the others leave it
    too little room. A cell of the other columns wider than its share ("12 (host-a, host-b,
    ...)") is cut with "...". A table whose only rows are its header (and pyinfra's "Grand
    total") is one line: "no operations"."""
    tables = [r for r in rows if not isinstance(r[1], str)]
    if tables and _is_empty(tables):
        return [(tables[0][0], "no operations")]
    widths = _widths(tables, width) if tables else []
    lines: list[Row] = []
    for func, columns in rows:
        texts = [columns] if isinstance(columns, str) else _row_lines(columns, widths)
        lines += [(func, text) for text in texts]
    return lines


def fit_cli_tables(width: int = TERMINAL_WIDTH) -> None:
    """Print the pyinfra CLI's "Detected changes" and "Results" tables within width columns
    (fitted_rows), from now on in this process. Nothing is dropped but the tail of an over-long
    host list, which pyinfra itself cuts at 48 characters. Idempotent; does nothing without
    the pyinfra CLI."""
    try:
        from pyinfra_cli import prints  # type: ignore[import-untyped]
    except ImportError:  # pyinfra's API without its CLI
        return
    if getattr(prints.print_rows, "gpunode_width", None) == width:
        return

    def print_rows(rows: Sequence[Row]) -> None:
        for func, line in fitted_rows(rows, width - LOG_INDENT):
            func(cast(str, line))

    print_rows.gpunode_width = width  # type: ignore[attr-defined]
    prints.print_rows = print_rows
def stored(state: object, attribute: str) -> dict[str, Any]:
    """The dict run_store keeps on state under attribute, without creating it ({} when none)."""
    return getattr(unproxied(state), attribute, None) or {}


def current_host() -> Host | None:
    """The host whose operation or deploy runs now, or None outside one."""
    return ctx_host.get() if ctx_host.isset() else None


def host_prefix(host: Any) -> str:
    """The ``[name] `` prefix pyinfra puts before a host's log lines (``[name] `` for a
    host without one, as pyinfra-testing's FakeHost)."""
    return getattr(host, "print_prefix", None) or f"[{host.name}] "


def fail_host(host: Any) -> None:
    """Mark host failed in this run: it gets no further operation, the other hosts go on,
    and pyinfra exits 1 (also when it was the last host: "No hosts remaining!" is swallowed)."""
    state = current_state()
    if state is None:
        raise RuntimeError("fail_host() needs a pyinfra run")
    with contextlib.suppress(PyinfraError):
        state.fail_hosts({host})


def fail_run_for(host: Any) -> None:
    """Make the run exit 1 because of host, which stays active and ends its operations: the
    verdict of a check, not an error (pyinfra_cli exits 1 when ``State.failed_hosts`` is not
    empty; a host failed by ``State.fail_hosts`` or a failing command instead ends with
    pyinfra's "Error: executed 0 commands" and, when it was the last host, "No hosts
    remaining!")."""
    state = current_state()
    if state is None:
        raise RuntimeError("fail_run_for() needs a pyinfra run")
    state.failed_hosts.add(cast(Host, unproxied(host)))


def diff_requested() -> bool:
    """True when the run shows file diffs (``--diff``); False outside a run."""
    state = current_state()
    return bool(getattr(getattr(state, "config", None), "DIFF", False))


def color_diff(old_lines: Sequence[str], new_lines: Sequence[str]) -> list[str]:
    """pyinfra's unified diff of two line lists (``@@`` hunks, ``- ``/``+ `` lines coloured)."""
    return list(generate_color_diff(list(old_lines), list(new_lines)))


def drop_connection(host: Any) -> None:
    """Close host's connection for good, without running anything on it (it may be gone, as
    after a reboot): the askpass paths of the old session forgotten (pyinfra's
    clear_askpass_cache, else disconnect would run ``rm`` over the dead connection), the SSH
    connector's paramiko client closed (pyinfra's SSHConnector.disconnect leaves it open: its
    socket and transport stay until the process ends), then Host.disconnect. Connectors
    without a client (@local, @pct) only disconnect."""
    clear_askpass_cache(host)
    client = getattr(getattr(host, "connector", None), "client", None)
    if client is not None and callable(getattr(client, "close", None)):
        with contextlib.suppress(Exception):
            client.close()
    host.disconnect()

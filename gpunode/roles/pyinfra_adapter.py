"""The pyinfra internals gpunode relies on, in one place (the bottom layer: imports no gpunode).

pyinfra's public API (``host``, ``state``, ``logger``, ``StringCommand``, ``FactBase``, the
operations) is used where it is needed; what reaches past it is here, each behaviour pinned by
tests/unit/test_pyinfra_adapter.py against the installed pyinfra (``pyinfra~=3.10`` in
pyproject.toml), so an upgrade that changes one fails there and not in a deploy:

- ``inner_commands``: the command generator behind a pyinfra operation (``op._inner``), to
  reuse pyinfra's own operation inside a gpunode operation (pyinfra refuses nested calls);
- ``is_executing`` / ``in_execute_stage``: whether the run is executing (``State.is_executing``,
  set by pyinfra's run_ops) or the CLI reached its execute stage (``State.current_stage``);
- ``operation_changed``: whether a finished operation changed its host
  (``state.ops[host][op_hash].operation_meta``);
- ``operation_results``: what the operations finished so far did on a host (changed, unchanged,
  failed; ``state.get_op_order()``, ``state.ops[host]``, ``state.get_op_meta(op_hash).names``);
- ``current_state`` / ``run_store``: the State of this run (``ctx_state``) and a dict kept on
  it, behind pyinfra's context proxy (``_get_module``);
- ``StateCallback``: the base class of a state callback handler (``add_callback_handler``);
- ``current_op_hash``: the operation whose generator runs now (``Host.current_op_hash``);
- ``checks_for_changes``: whether this run detects changes before executing (``--dry`` and
  the interactive run) or executes at once (``-y``) (``State.check_for_changes``);
- ``deploy``: pyinfra's ``@deploy``, typed as the function it wraps. pyinfra types a decorated
  deploy or operation as ``PyinfraOperation``, whose ``__call__`` puts its global arguments
  (``_sudo``, ...) before the function's own, so a positional call (``site_tuning(profile)``)
  does not type-check. gpunode's operations are called with keywords (``name=``, then their
  own), which pyinfra's typing checks as it is: they use pyinfra's ``@operation``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

from pyinfra import state as _state_proxy
from pyinfra.api import deploy as _pyinfra_deploy
from pyinfra.api.state import BaseStateCallback, State, StateStage
from pyinfra.context import ctx_host, ctx_state

__all__ = [
    "StateCallback",
    "checks_for_changes",
    "current_op_hash",
    "current_state",
    "deploy",
    "in_execute_stage",
    "inner_commands",
    "is_executing",
    "operation_changed",
    "operation_results",
    "run_store",
    "unproxied",
]

StateCallback = BaseStateCallback
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


def operation_changed(state: Any, host: Any, op_hash: str) -> bool:
    """Whether the operation op_hash changed host; True when pyinfra can't say (not complete,
    or an unknown shape): a caller that caches must never serve a stale value."""
    try:
        meta = state.ops[host][op_hash].operation_meta
        return not meta.is_complete() or bool(meta.did_change())
    except Exception:  # noqa: BLE001 - unknown shape: assume it changed
        return True


def current_op_hash() -> str | None:
    """The hash of the operation whose generator runs on the current host (None outside)."""
    return getattr(ctx_host.get(), "current_op_hash", None) if ctx_host.isset() else None


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

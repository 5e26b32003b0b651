"""Read each gpunode fact once per host until an operation changes that host.

pyinfra 3.10 runs a fact's command on every host.get_fact call, and evaluates every operation
twice (change detection, then execution), so the same read would run many times per deploy.
cached_fact() keeps one value per (host, stage, fact, arguments) and drops a host's values as
soon as an operation that changed something on it finishes: reads stay as fresh as pyinfra's
own, and the execute stage always re-reads what prepare saw.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from pyinfra import host as current_host
from pyinfra.api.state import BaseStateCallback
from pyinfra.context import ctx_state

_CACHE_ATTRIBUTE = "_gpunode_fact_cache"


class FactCache(BaseStateCallback):
    """Per-state store of fact values, invalidated by changing operations."""

    def __init__(self) -> None:
        self.values: dict[tuple, Any] = {}
        self.generation: dict[str, int] = defaultdict(int)
        self.misses = 0
        self.hits = 0
        # pyinfra calls operation_host_success before it records the operation's commands
        # (OperationMeta.set_complete), so did_change() can't be asked there: remember the
        # operation and ask at the host's next fact read, when the answer is known.
        self.pending: dict[str, list[tuple]] = defaultdict(list)

    def invalidate(self, host_name: str) -> None:
        self.generation[host_name] += 1
        self.pending.pop(host_name, None)

    def settle(self, host_name: str) -> None:
        """Invalidate the host if an operation that finished since the last read changed it."""
        for state, host, op_hash in self.pending.pop(host_name, []):
            if _op_changed(state, host, op_hash):
                self.invalidate(host_name)
                return

    def operation_host_success(self, state, host, op_hash, retry_count: int = 0) -> None:
        self.pending[host.name].append((state, host, op_hash))

    def operation_host_error(self, state, host, op_hash, *args) -> None:
        self.invalidate(host.name)


def _op_changed(state, host, op_hash) -> bool:
    try:
        meta = state.ops[host][op_hash].operation_meta
        return not meta.is_complete() or bool(meta.did_change())
    except Exception:  # noqa: BLE001 - unknown shape: assume it changed (never serve stale)
        return True


def cache_for(state) -> FactCache | None:
    """The state's cache, created and registered on first use; None for test states."""
    cache = getattr(state, _CACHE_ATTRIBUTE, None)
    if cache is None and hasattr(state, "add_callback_handler"):
        cache = FactCache()
        state.add_callback_handler(cache)
        setattr(state, _CACHE_ATTRIBUTE, cache)
    return cache


def _key(host_name: str, stage: Any, generation: int, fact_cls: type, kwargs: dict) -> tuple:
    return (host_name, stage, generation, fact_cls, json.dumps(kwargs, sort_keys=True,
                                                               default=str))


def cached_fact(fact_cls: type, **kwargs: Any) -> Any:
    """host.get_fact(fact_cls, **kwargs), read once per host until that host changes."""
    state = ctx_state.get() if ctx_state.isset() else None
    cache = cache_for(state) if state is not None else None
    if cache is None:
        return current_host.get_fact(fact_cls, **kwargs)
    name = current_host.name
    cache.settle(name)
    key = _key(name, state.current_stage, cache.generation[name], fact_cls, kwargs)
    if key not in cache.values:
        cache.misses += 1
        cache.values[key] = current_host.get_fact(fact_cls, **kwargs)
    else:
        cache.hits += 1
    return cache.values[key]

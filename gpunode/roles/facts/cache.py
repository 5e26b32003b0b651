"""Read each gpunode fact once per host until an operation changes that host.

pyinfra 3.10 runs a fact's command on every host.get_fact call, and evaluates every operation
twice (change detection, then execution), so the same read would run many times per deploy.
cached_fact() keeps one value per (host, fact, arguments) and drops a host's values as soon as
an operation that changed something on it has finished (checked at the host's next read): reads
stay as fresh as pyinfra's own. What change detection read stays true in the execute stage
until an operation changes the host, so a converged host is read once per run.

prefetch() fills the cache for many reads with one remote command (gpunode.roles.facts.bundle); a
fact class may say, with `answers(cached_kwargs, wanted_kwargs)`, that a read with wider
arguments answers a narrower one (KernelParams of all the profile's sysctls and modules
answers the sysctl operation's and the module operation's reads).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from pyinfra import host as current_host

from gpunode.roles.facts.bundle import FactBundle, FactRead, bundle_values, bundleable
from gpunode.roles.pyinfra_adapter import StateCallback, current_state, operation_changed

_CACHE_ATTRIBUTE = "_gpunode_fact_cache"


class FactCache(StateCallback):
    """Per-state store of fact values, invalidated by changing operations."""

    def __init__(self) -> None:
        self.values: dict[tuple, Any] = {}
        self.generation: dict[str, int] = defaultdict(int)
        self.misses = 0
        self.hits = 0
        self.bundled = 0
        # pyinfra calls operation_host_success before it records the operation's commands
        # (OperationMeta.set_complete), so did_change() can't be asked there: remember the
        # operation and ask at the host's next fact read, when the answer is known.
        self.pending: dict[str, list[tuple]] = defaultdict(list)

    def invalidate(self, host_name: str) -> None:
        self.generation[host_name] += 1
        self.pending.pop(host_name, None)
        self.values = {key: value for key, value in self.values.items() if key[0] != host_name}

    def settle(self, host_name: str) -> None:
        """Invalidate the host if an operation that finished since the last read changed it."""
        for state, host, op_hash in self.pending.pop(host_name, []):
            if operation_changed(state, host, op_hash):
                self.invalidate(host_name)
                return

    def operation_host_success(self, state, host, op_hash, retry_count: int = 0) -> None:
        self.pending[host.name].append((state, host, op_hash))

    def operation_host_error(self, state, host, op_hash, *args) -> None:
        self.invalidate(host.name)


def cache_for(state) -> FactCache | None:
    """The state's cache, created and registered on first use; None for test states."""
    cache = getattr(state, _CACHE_ATTRIBUTE, None)
    if cache is None and hasattr(state, "add_callback_handler"):
        cache = FactCache()
        state.add_callback_handler(cache)
        setattr(state, _CACHE_ATTRIBUTE, cache)
    return cache


def _key(host_name: str, generation: int, read: FactRead) -> tuple:
    return (host_name, generation, read.fact, read.key())


def _current_cache() -> FactCache | None:
    state = current_state()
    return cache_for(state) if state is not None else None


def _answering_value(cache: FactCache, host_name: str, read: FactRead) -> tuple[bool, Any]:
    """A cached value of a wider read of the same fact that answers this one, if any."""
    answers = getattr(read.fact, "answers", None)
    if answers is None:
        return False, None
    generation = cache.generation[host_name]
    for (name, gen, fact_cls, key), value in cache.values.items():
        if (name, gen, fact_cls) == (host_name, generation, read.fact) and answers(
            json.loads(key), read.kwargs
        ):
            return True, value
    return False, None


def cached_fact(fact_cls: type, **kwargs: Any) -> Any:
    """host.get_fact(fact_cls, **kwargs), read once per host until that host changes."""
    cache = _current_cache()
    if cache is None:
        return current_host.get_fact(fact_cls, **kwargs)
    name, read = current_host.name, FactRead(fact_cls, kwargs)
    cache.settle(name)
    key = _key(name, cache.generation[name], read)
    if key in cache.values:
        cache.hits += 1
        return cache.values[key]
    found, value = _answering_value(cache, name, read)
    if found:
        cache.hits += 1
    else:
        cache.misses += 1
        value = current_host.get_fact(fact_cls, **kwargs)
    cache.values[key] = value
    return value


def cached_read(read: FactRead) -> Any:
    """cached_fact() of a FactRead."""
    return cached_fact(read.fact, **read.kwargs)


def prefetch(reads: list[FactRead]) -> int:
    """Read the current host's uncached reads in one remote command; returns how many it
    cached. Reads it could not answer (failed command, precondition) stay for their own read."""
    cache = _current_cache()
    if cache is None:
        return 0
    name = current_host.name
    cache.settle(name)
    generation = cache.generation[name]
    todo: dict[tuple, FactRead] = {}
    for read in reads:
        key = _key(name, generation, read)
        if key not in cache.values and bundleable(read):
            todo.setdefault(key, read)
    if len(todo) < 2:
        return 0
    keys, bundled = list(todo), list(todo.values())
    values = bundle_values(bundled, current_host.get_fact(FactBundle, reads=bundled) or [])
    for index, value in values.items():
        cache.values[keys[index]] = value
    cache.bundled += len(values)
    return len(values)

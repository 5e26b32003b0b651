"""Read each gpunode fact once per host; read again only what an operation changed.

pyinfra 3.10 runs a fact's command on every host.get_fact call, and evaluates every operation
twice (change detection, then execution), so the same read would run many times per deploy.
cached_fact() keeps one value per (host, fact, arguments, part). When an operation has changed a
host (checked at the host's next read), the values it changed are dropped: those it declared
with changes_fact() while it ran, or every value of the host when it declared nothing (pyinfra's own
operations, a reboot, a package install). Reads stay as fresh as pyinfra's own; what no
operation touched is not read again, so a converged host is read once per run.

prefetch() fills the cache for many reads with one remote command (gpunode.facts.bundle).
A fact class may say, with `answers(cached_kwargs, wanted_kwargs)`, that a read with wider
arguments answers a narrower one (KernelParams of all the profile's sysctls and modules
answers the sysctl operation's and the module operation's reads); a read with a `part` (a name
for the fields an operation uses, as CpuPower's "cpuidle" and "cpufreq") is answered by the
whole read. Narrow reads in a prefetch are stored from the wide one without a section of their
own, so a change to one part leaves the other parts cached.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from pyinfra import host as current_host
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus

from gpunode.facts.bundle import (
    FactBundle,
    FactRead,
    bundle_values,
    bundleable,
)
from gpunode.facts.sections import fact_data
from gpunode.pyinfra_adapter import (
    StateCallback,
    current_op_hash,
    current_state,
    operation_changed,
)

_CACHE_ATTRIBUTE = "_gpunode_fact_cache"

Entry = tuple[FactRead, Any]


def _kwargs_match(cached: dict[str, Any], where: dict[str, Any]) -> bool:
    """Does a change limited to `where` (argument -> value or list) touch a read of `cached`?
    Lists touch lists they share an item with, scalars equal ones; an argument the cached
    read lacks (it reads everything along it) is touched."""
    for name, value in where.items():
        if name not in cached:
            continue
        mine = cached[name]
        mine_set = set(mine) if isinstance(mine, (list, tuple, set, frozenset)) else {mine}
        theirs = set(value) if isinstance(value, (list, tuple, set, frozenset)) else {value}
        if not mine_set & theirs:
            return False
    return True


class FactChange:
    """What one operation changed on a host: a fact, optionally one part, optionally only
    the reads whose arguments meet `where` (see _kwargs_match)."""

    __slots__ = ("fact", "part", "where")

    def __init__(self, fact: type, part: str | None = None, **where: Any) -> None:
        self.fact, self.part, self.where = fact, part, where

    def touches(self, read: FactRead) -> bool:
        """A fact that holds this one's data too (its `includes`) is touched whole."""
        if self.fact in getattr(read.fact, "includes", ()):
            return True
        if read.fact is not self.fact:
            return False
        if self.part is not None and read.part is not None and read.part != self.part:
            return False
        return _kwargs_match(read.kwargs, self.where)

    def __repr__(self) -> str:
        return f"FactChange({self.fact.__name__}, part={self.part!r}, {self.where!r})"


class FactCache(StateCallback):
    """Per-state store of fact values, by host; changing operations drop what they changed."""

    def __init__(self) -> None:
        self.values: dict[str, dict[tuple, Entry]] = defaultdict(dict)
        self.misses = 0
        self.hits = 0
        self.bundled = 0
        self.dropped = 0
        # pyinfra calls operation_host_success before it records the operation's commands
        # (OperationMeta.set_complete), so did_change() can't be asked there: remember the
        # operation and ask at the host's next fact read, when the answer is known.
        self.pending: dict[str, list[tuple]] = defaultdict(list)
        # (host name, op hash) -> what the operation declared it changes (changes_fact()).
        self.declared: dict[tuple[str, str], list[FactChange]] = defaultdict(list)

    def invalidate(self, host_name: str) -> None:
        """Forget every value of the host."""
        self.pending.pop(host_name, None)
        self.dropped += len(self.values.pop(host_name, {}))

    def drop(self, host_name: str, changes: list[FactChange]) -> None:
        """Forget the host's values that these changes touch."""
        values = self.values.get(host_name, {})
        stale = [key for key, (read, _) in values.items()
                 if any(change.touches(read) for change in changes)]
        for key in stale:
            del values[key]
        self.dropped += len(stale)

    def settle(self, host_name: str) -> None:
        """Drop what the operations that finished since the host's last read changed."""
        for state, host, op_hash in self.pending.pop(host_name, []):
            if not operation_changed(state, host, op_hash):
                continue
            declared = self.declared.get((host_name, op_hash))
            if not declared:
                self.invalidate(host_name)
                return
            self.drop(host_name, declared)

    def declare(self, host_name: str, op_hash: str, change: FactChange) -> None:
        self.declared[(host_name, op_hash)].append(change)

    # pyinfra declares the handlers static and calls them on the handler instance.
    def operation_host_success(  # type: ignore[override]
        self, state: Any, host: Any, op_hash: Any, retry_count: int = 0
    ) -> None:
        self.pending[host.name].append((state, host, op_hash))

    def operation_host_error(self, state: Any, host: Any, op_hash: Any, *args: Any) -> None:  # type: ignore[override]
        self.invalidate(host.name)


def cache_for(state) -> FactCache | None:
    """The state's cache, created and registered on first use; None for test states."""
    cache = getattr(state, _CACHE_ATTRIBUTE, None)
    if cache is None and hasattr(state, "add_callback_handler"):
        cache = FactCache()
        state.add_callback_handler(cache)
        setattr(state, _CACHE_ATTRIBUTE, cache)
    return cache


def _key(read: FactRead) -> tuple:
    return (read.fact, read.key(), read.part)


def _current_cache() -> FactCache | None:
    state = current_state()
    return cache_for(state) if state is not None else None


# Facts whose reads of a few items each merge into one read of all of them: the argument
# that lists the items, whose value is a mapping keyed by those items. gpunode's own facts
# say so with a `merged_by` attribute; pyinfra's systemd facts read any number of units.
_MERGED_BY: dict[type, str] = {SystemdStatus: "services", SystemdEnabled: "services"}


def merged_by(fact: type) -> str | None:
    """The argument along which reads of this fact merge (None: they don't)."""
    return getattr(fact, "merged_by", None) or _MERGED_BY.get(fact)


def _other_arguments(kwargs: dict[str, Any], argument: str) -> dict[str, Any]:
    """A read's arguments but the one its items merge along."""
    return {name: value for name, value in kwargs.items() if name != argument}


def _covers(wide: dict[str, Any], narrow: dict[str, Any], argument: str) -> bool:
    """Same other arguments, and the narrow read's items among the wide read's."""
    return (_other_arguments(wide, argument) == _other_arguments(narrow, argument)
            and set(narrow.get(argument, ())) <= set(wide.get(argument, ())))


def answers(wide: FactRead, narrow: FactRead) -> bool:
    """Does the value of `wide` hold everything `narrow` asks for?"""
    if wide.fact is not narrow.fact or (wide.part is not None and wide.part != narrow.part):
        return False
    if wide.kwargs == narrow.kwargs:
        return True
    argument = merged_by(wide.fact)
    if argument:
        return _covers(json.loads(wide.key()), json.loads(narrow.key()), argument)
    check = getattr(wide.fact, "answers", None)
    return bool(check and check(json.loads(wide.key()), narrow.kwargs))


def narrowed(read: FactRead, value: Any) -> Any:
    """A wider read's value cut to the items `read` asks for (facts with merged_by), so that
    a caller that looks at all of its value sees what its own read would have returned."""
    argument = merged_by(read.fact)
    data = fact_data(value)
    if not argument or not isinstance(data, dict):
        return value
    wanted = set(read.kwargs.get(argument, ()))
    return {item: item_value for item, item_value in data.items() if item in wanted}


def merged_reads(reads: list[FactRead]) -> list[FactRead]:
    """One read per fact (with merged_by) and other arguments, of all the items the reads
    of it ask for (sorted: two facts of the same units read alike, see bundle.JOINT_FACTS),
    where two or more reads could share it."""
    groups: dict[tuple, list[FactRead]] = defaultdict(list)
    for read in reads:
        argument = merged_by(read.fact)
        if argument and read.part is None:
            rest = _other_arguments(read.kwargs, argument)
            groups[(read.fact, json.dumps(rest, sort_keys=True, default=str))].append(read)
    merged = []
    for group in groups.values():
        if len(group) > 1:
            argument = merged_by(group[0].fact) or ""
            items = sorted({item for read in group for item in read.kwargs.get(argument, ())})
            merged.append(FactRead(group[0].fact, {**group[0].kwargs, argument: items}))
    return merged


def widest(reads: list[FactRead]) -> list[FactRead]:
    """The reads no other read answers (of two that answer each other, the first)."""
    return [read for i, read in enumerate(reads)
            if not any(j != i and answers(other, read) and (j < i or not answers(read, other))
                       for j, other in enumerate(reads))]


def _answering_value(values: dict[tuple, Entry], read: FactRead) -> tuple[bool, Any]:
    """A cached value of a wider read of the same fact that answers this one, if any."""
    for cached, value in values.values():
        if cached is not read and answers(cached, read):
            return True, narrowed(read, value)
    return False, None


def changes_fact(fact_cls: type, part: str | None = None, **where: Any) -> None:
    """Declare, from inside an operation, that its commands change this fact on the current
    host (a part of it, or the reads whose arguments meet `where`): when it has run, those
    values are read again and the others stay cached. Declare everything the commands can
    change; an operation that declares nothing drops every value of the host."""
    cache = _current_cache()
    op_hash = current_op_hash() if cache is not None else None
    if cache is not None and op_hash:
        cache.declare(current_host.name, op_hash, FactChange(fact_cls, part, **where))


def cached_fact(fact_cls: type, part: str | None = None, **kwargs: Any) -> Any:
    """host.get_fact(fact_cls, **kwargs), read once per host until an operation changes it.
    `part` names the fields the caller uses (see FactChange); the read is the same."""
    cache = _current_cache()
    if cache is None:
        return current_host.get_fact(fact_cls, **kwargs)
    name, read = current_host.name, FactRead(fact_cls, kwargs, part)
    cache.settle(name)
    values = cache.values[name]
    key = _key(read)
    if key in values:
        cache.hits += 1
        return values[key][1]
    found, value = _answering_value(values, read)
    if found:
        cache.hits += 1
    else:
        cache.misses += 1
        value = current_host.get_fact(fact_cls, **kwargs)
    values[key] = (read, value)
    return value


def cached_read(read: FactRead) -> Any:
    """cached_fact() of a FactRead."""
    return cached_fact(read.fact, read.part, **read.kwargs)


def prefetch(reads: list[FactRead]) -> int:
    """Read the current host's uncached reads in one remote command; returns how many it
    cached. Reads of a fact with merged_by share one read of all their items; a read that
    another read of the list answers gets no section of its own; reads the bundle could not
    answer (failed command, precondition) stay for their own read."""
    cache = _current_cache()
    if cache is None:
        return 0
    name = current_host.name
    cache.settle(name)
    values = cache.values[name]
    todo: dict[tuple, FactRead] = {}
    for read in reads:
        key = _key(read)
        if key not in values and bundleable(read):
            todo.setdefault(key, read)
    wanted = list(todo)
    for wide in merged_reads(list(todo.values())):
        todo.setdefault(_key(wide), wide)
    own = widest(list(todo.values()))
    if len(own) < 2:
        return 0
    bundled = [read.plain() for read in own]
    results = bundle_values(bundled, current_host.get_fact(FactBundle, reads=bundled) or [])
    for key, read in todo.items():
        index = next((i for i, wide in enumerate(own) if wide is read or answers(wide, read)),
                     None)
        if index in results:
            value = results[index]
            values[key] = (read, value if own[index] is read else narrowed(read, value))
    stored = sum(key in values for key in wanted)
    cache.bundled += stored
    return stored

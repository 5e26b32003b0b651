"""The fact cache on a real pyinfra State and a real @local host: one read until a change."""

from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_host, ctx_state
from pyinfra.facts.server import Hostname

from roles.facts.cache import cache_for, cached_fact


def _local_state() -> State:
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    return state


def test_one_read_per_stage_until_an_operation_changes_the_host(monkeypatch):
    state = _local_state()
    host = state.inventory.get_host("@local")
    calls = []
    original = type(host).run_shell_command

    def counted(self, *args, **kwargs):
        calls.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type(host), "run_shell_command", counted)
    with ctx_state.use(state), ctx_host.use(host):
        state.current_stage = StateStage.Prepare
        first = cached_fact(Hostname)
        assert cached_fact(Hostname) == first
        assert len(calls) == 1
        cache = cache_for(state)
        cache.invalidate(host.name)  # what a changing operation triggers
        cached_fact(Hostname)
        assert len(calls) == 2
        state.current_stage = StateStage.Execute
        cached_fact(Hostname)
        assert len(calls) == 3
        assert (cache.hits, cache.misses) == (1, 3)

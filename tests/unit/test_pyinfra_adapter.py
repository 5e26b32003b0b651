"""Each pyinfra behaviour gpunode relies on (gpunode.roles.pyinfra_adapter), pinned against the
installed pyinfra on a real State and a real @local host: a pyinfra upgrade that changes one
fails here, not in a deploy."""

from __future__ import annotations

import inspect

import pytest
from pyinfra.api import Config, FunctionCommand, Inventory, State, StringCommand, operation
from pyinfra.api.connect import connect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.api.operation import add_op
from pyinfra.api.operations import run_ops
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_host, ctx_state
from pyinfra.operations import apt, systemd

from gpunode.roles import pyinfra_adapter as adapter


@pytest.fixture()
def local():
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    return state, state.inventory.get_host("@local")


def test_pyinfra_operations_keep_their_command_generator_as_inner():
    for op, params in ((apt.packages, {"packages"}),
                       (systemd.service, {"service", "running", "enabled"})):
        assert inspect.isgeneratorfunction(op._inner)
        assert params <= set(inspect.signature(op._inner).parameters)


def test_inner_commands_yields_an_operations_commands_without_adding_it(local):
    state, host = local

    @operation()
    def echo(word: str):
        yield StringCommand("echo", word)

    with ctx_state.use(state), ctx_host.use(host):
        commands = list(adapter.inner_commands(echo, word="hi"))
    assert [str(c) for c in commands] == ["echo hi"]
    assert state.get_op_order() == []


def test_execution_flag_and_stage(local):
    state, host = local
    assert adapter.current_state() is None
    assert adapter.is_executing() is False  # no pyinfra state at all
    seen: dict[str, bool] = {}

    @operation()
    def record():
        seen.setdefault("detect", adapter.is_executing())
        yield FunctionCommand(lambda *a, **k: seen.setdefault("run", adapter.is_executing()),
                              (), {})

    with ctx_state.use(state):
        assert adapter.current_state() is state
        assert state.current_stage == StateStage.Setup
        assert not adapter.in_execute_stage()
        state.set_stage(StateStage.Prepare)
        add_op(state, record)
        state.set_stage(StateStage.Execute)
        assert adapter.in_execute_stage()
        run_ops(state)
    assert seen == {"detect": False, "run": True}


def test_operation_changed_reads_the_operation_meta(local):
    state, host = local

    @operation()
    def changes():
        yield StringCommand("true")

    @operation()
    def converged():
        host.noop("nothing to do")
        yield from ()

    with ctx_state.use(state):
        changed = add_op(state, changes)[host]
        unchanged = add_op(state, converged)[host]
        assert adapter.operation_changed(state, host, "no-such-hash") is True
        run_ops(state)
    assert adapter.operation_changed(state, host, changed._hash) is True
    assert adapter.operation_changed(state, host, unchanged._hash) is False


def test_operation_results_counts_changed_unchanged_and_failed(local):
    state, host = local

    @operation()
    def changes():
        yield StringCommand("true")

    @operation()
    def converged():
        host.noop("nothing to do")
        yield from ()

    @operation()
    def breaks():
        yield StringCommand("false")

    assert adapter.operation_results(None, host) == ([], 0, [])
    with ctx_state.use(state):
        add_op(state, changes, name="Write a file")
        add_op(state, converged, name="Already right")
        add_op(state, breaks, name="Fails", _ignore_errors=True)
        run_ops(state)
    assert adapter.operation_results(state, host) == (["Write a file"], 1, ["Fails"])


def test_state_callback_hears_each_operation(local):
    state, host = local
    heard: list[str] = []

    class Listener(adapter.StateCallback):
        def operation_host_success(self, state, host, op_hash, retry_count=0):
            heard.append(op_hash)

    @operation()
    def changes():
        yield StringCommand("true")

    state.add_callback_handler(Listener())
    with ctx_state.use(state):
        meta = add_op(state, changes)[host]
        run_ops(state)
    assert heard == [meta._hash]


def test_run_store_lives_on_the_real_state(local):
    state, _ = local
    with ctx_state.use(state):
        store = adapter.run_store("gpunode_test_store")
        store["x"] = 1
        assert adapter.run_store("gpunode_test_store") is store
    assert state.gpunode_test_store == {"x": 1}
    other = State(Inventory((["@local"], {})), Config())
    with ctx_state.use(other):
        assert adapter.run_store("gpunode_test_store") == {}


def test_unproxied():
    from pyinfra import state as proxy

    plain = object()
    assert adapter.unproxied(plain) is plain
    real = State(Inventory((["@local"], {})), Config())
    with ctx_state.use(real):
        assert adapter.unproxied(proxy) is real


def test_deploy_is_pyinfras_deploy(local):
    state, host = local

    @operation()
    def echo(word: str):
        yield StringCommand("echo", word)

    @adapter.deploy("gpunode: test")
    def role(word: str) -> None:
        echo(name=f"Say {word}", word=word)

    with ctx_state.use(state):
        add_deploy(state, role, "hi")
    (op_hash,) = state.get_op_order()
    assert state.get_op_meta(op_hash).names == {"gpunode: test | Say hi"}

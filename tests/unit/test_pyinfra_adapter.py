"""Each pyinfra behaviour gpunode relies on (gpunode.pyinfra_adapter), pinned against the
installed pyinfra on a real State and a real @local host: a pyinfra upgrade that changes one
fails here, not in a deploy."""

from __future__ import annotations

import inspect
import re

import pytest
from pyinfra.api import Config, FunctionCommand, Inventory, State, StringCommand, operation
from pyinfra.api.connect import connect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.api.operation import add_op
from pyinfra.api.operations import run_ops
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_host, ctx_state
from pyinfra.operations import apt, systemd
from pyinfra_testing.util import FakeHost

from gpunode import pyinfra_adapter as adapter


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


LONG = ("gpunode: tuning | PCIe, C-states and CPU frequency | Write "
        "/etc/systemd/system.conf.d/90-gpunode-memlock.conf with a name past the table")


def rows(*data: list[str], total: bool = False) -> list:
    header = (print, ["Operation", "Hosts", "Success", "Error", "No Change"])
    body = [(print, list(cells)) for cells in data]
    return [header, *body, *([(print, ["Grand total", "1", "-", "-", "1"])] if total else [])]


def test_fitted_rows_wrap_the_name_and_keep_every_word():
    lines = [line for _, line in adapter.fitted_rows(rows([LONG, "1", "1", "-", "-"]), 96)]
    assert max(len(line) for line in lines) <= 96
    assert lines[0].split() == ["Operation", "Hosts", "Success", "Error", "No", "Change"]
    assert lines[2].startswith("  ") and not any(line != line.rstrip() for line in lines)
    assert " ".join(" ".join(lines[1:]).split()).startswith(" ".join(LONG.split()[:3]))
    assert all(word in " ".join(lines) for word in LONG.split())


def test_fitted_rows_cut_an_over_long_host_list_but_keep_its_count():
    hosts = "256 (" + ", ".join(f"gpu-node-{i:03}" for i in range(4)) + ")"
    table = [(print, ["Operation", "Change", "Conditional Change"]),
             (print, ["Set sysctl values now", hosts, hosts])]
    lines = [line for _, line in adapter.fitted_rows(table, 96)]
    assert max(len(line) for line in lines) <= 96
    assert "Set sysctl values now" in lines[1] and lines[1].count("256 (gpu-node-000") == 2


def test_fitted_rows_print_an_empty_table_as_one_line():
    assert [line for _, line in adapter.fitted_rows(rows(total=True))] == ["no operations"]
    assert [line for _, line in adapter.fitted_rows(rows())] == ["no operations"]
    assert [line for _, line in adapter.fitted_rows([(print, "text")])] == ["text"]


def test_pyinfra_prints_its_tables_through_print_rows():
    """What fit_cli_tables replaces: both tables go through the module's print_rows."""
    from pyinfra_cli import cli as pyinfra_cli_main
    from pyinfra_cli import prints

    for table in (prints.print_meta, prints.print_results):
        assert "print_rows" in table.__code__.co_names
        assert table.__globals__ is vars(prints)
    assert pyinfra_cli_main.print_meta is prints.print_meta
    assert pyinfra_cli_main.print_results is prints.print_results


NAME = "gpunode: tuning | Write /etc/systemd/system.conf.d/90-gpunode-memlock.conf"  # 74
DEPLOY = '''
from pyinfra.operations import server
from gpunode.pyinfra_adapter import fit_cli_tables

fit_cli_tables()
{ops}
'''


@pytest.mark.parametrize("args", [["--dry"], ["-y"], []])
@pytest.mark.parametrize("with_ops", [True, False])
def test_the_real_cli_prints_fitted_tables(tmp_path, monkeypatch, args, with_ops):
    """The pyinfra CLI on @local: "Detected changes" (--dry, interactive) and "Results" (-y,
    interactive) within 100 columns with an operation name too long for one table line (it
    fits the "--> Starting operation: NAME" line), "no operations" without an operation."""
    import pyinfra
    from click.testing import CliRunner
    from pyinfra.context import ctx_config, ctx_inventory
    from pyinfra_cli.cli import cli

    deploy_file = tmp_path / "deploy.py"
    ops = f"server.shell(name={NAME!r}, commands=['true'])" if with_ops else ""
    deploy_file.write_text(DEPLOY.format(ops=ops))
    monkeypatch.setattr(pyinfra, "is_cli", True)
    handlers = list(pyinfra.logger.handlers)  # each in-process run adds the CLI's log handler
    pyinfra.logger.handlers[:] = []
    try:
        result = CliRunner().invoke(cli, ["@local", str(deploy_file), *args], input="\n")
    finally:
        pyinfra.logger.handlers[:] = handlers
        for context in (ctx_state, ctx_host, ctx_inventory, ctx_config):
            context.reset()
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 100, result.output
    tables = [i for i, line in enumerate(lines) if line.startswith(("--> Detected", "--> Results"))]
    assert len(tables) == {"--dry": 1, "-y": 1}.get(args[0] if args else "", 2), result.output
    for i in tables:
        if with_ops:
            assert lines[i + 1].split()[0] == "Operation"
            assert lines[i + 2].startswith(f"    {NAME.split()[0]}")
            assert lines[i + 3].startswith("      ") and NAME.split()[-1] in lines[i + 3]
        else:
            assert lines[i + 1].strip() == "no operations", result.output
def plain(text: str) -> str:
    """Text without the ANSI colour codes pyinfra's format_text adds."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_stored_reads_the_run_store_without_creating_it(local):
    state, _ = local
    assert adapter.stored(state, "gpunode_test_store") == {}
    assert not hasattr(state, "gpunode_test_store")
    with ctx_state.use(state):
        adapter.run_store("gpunode_test_store")["x"] = 1
        from pyinfra import state as proxy

        assert adapter.stored(proxy, "gpunode_test_store") == {"x": 1}
    assert adapter.stored(state, "gpunode_test_store") == {"x": 1}


def test_current_host_and_its_log_prefix(local):
    state, host = local
    assert adapter.current_host() is None
    with ctx_state.use(state), ctx_host.use(host):
        assert adapter.current_host() is host
    assert plain(adapter.host_prefix(host)) == "[@local] "
    # A host object without pyinfra's prefix (pyinfra-testing's FakeHost has "").
    assert adapter.host_prefix(FakeHost(None, "gpu-07", {}, {})) == "[gpu-07] "


def test_fail_host_removes_it_from_the_run_even_when_it_was_the_last(local):
    state, host = local
    assert host in state.active_hosts
    with pytest.raises(RuntimeError):
        adapter.fail_host(host)  # no run
    with ctx_state.use(state):
        adapter.fail_host(host)  # pyinfra raises "No hosts remaining!": swallowed
    assert host in state.failed_hosts
    assert host not in state.active_hosts


def test_fail_host_leaves_the_other_hosts_running():
    state = State(Inventory((["@local", "@ssh/other"], {})), Config())
    local_host, other = state.inventory.get_host("@local"), state.inventory.get_host("@ssh/other")
    state.activate_host(local_host)
    state.activate_host(other)
    with ctx_state.use(state):
        adapter.fail_host(local_host)
    assert state.failed_hosts == {local_host}
    assert state.active_hosts == {other}


def test_diff_requested_is_the_diff_flag():
    assert adapter.diff_requested() is False  # no run
    for flag in (True, False):
        state = State(Inventory((["@local"], {})), Config(DIFF=flag))
        with ctx_state.use(state):
            assert adapter.diff_requested() is flag


def test_color_diff_is_a_unified_diff_with_pyinfras_markers():
    lines = adapter.color_diff(["a\n", "b\n", "c\n"], ["a\n", "B\n", "c\n", "d\n"])
    assert [plain(line) for line in lines] == ["@@ -1,3 +1,4 @@", "  a", "- b", "+ B", "  c",
                                               "+ d"]
    assert adapter.color_diff(["same\n"], ["same\n"]) == []


def test_pyinfras_ssh_disconnect_leaves_its_client_open_so_drop_connection_closes_it(local):
    from pyinfra.connectors.ssh import SSHConnector

    closed = []
    client = type("Client", (), {"close": lambda self: closed.append(1)})()
    connector = SSHConnector.__new__(SSHConnector)
    connector.client = client
    connector.disconnect()
    assert closed == []  # pyinfra 3.10: the old session stays open (drop_connection's reason)

    state, host = local
    host.connector.client = client
    host.connector_data["sudo_askpass_path"] = "/tmp/pyinfra-askpass-x"
    with ctx_state.use(state), ctx_host.use(host):
        adapter.drop_connection(host)
    assert closed == [1] and host.connected is False
    assert not host.connector_data["sudo_askpass_path"]  # forgotten, not rm'd over a dead link


def test_another_pyinfra_stops_at_import_with_the_fix():
    """The range is gpunode's declared requirement (package metadata), compared by packaging."""
    from importlib import metadata

    from gpunode.pyinfra_adapter import pyinfra_problem

    requires = ["jinja2>=3.1", "pyinfra>=3.10,<3.11", "pytest>=8; extra == 'test'"]
    assert pyinfra_problem("3.10.0", requires) is None
    assert pyinfra_problem("3.10.2", requires) is None
    problem = pyinfra_problem("3.11.0", requires)
    assert problem and "pyinfra 3.11.0 is installed" in problem
    assert "Fix: pip install 'pyinfra" in problem
    assert pyinfra_problem("3.9.2", requires)
    assert pyinfra_problem("4.0", ["jinja2"]) is None  # no pin declared: nothing to check
    installed = metadata.requires("gpunode") or []
    assert pyinfra_problem(metadata.version("pyinfra"), installed) is None
    assert any(line.startswith("pyinfra") and "<" in line for line in installed), installed

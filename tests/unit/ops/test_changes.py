"""Value-level change lines (gpunode.ops.changes) and the refusal of a host before any
change (gpunode.ops.preflight), on a real pyinfra State with a real @local host."""

from __future__ import annotations

import logging
import re

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.context import ctx_host, ctx_state

from gpunode.ops import changes
from gpunode.ops.changes import Change, changes_of, report_change, shorten
from gpunode.ops.preflight import refuse_host


@pytest.fixture()
def run(request):
    """A connected @local State (--diff when the test is parametrised with True), in context."""
    diff = getattr(request, "param", False)
    state = State(Inventory((["@local"], {})), Config(DIFF=diff))
    connect_all(state)
    host = state.inventory.get_host("@local")
    with ctx_state.use(state), ctx_host.use(host):
        yield state, host


def logged(caplog) -> list[str]:
    return [re.sub(r"\x1b\[[0-9;]*m", "", r.getMessage()) for r in caplog.records]


@pytest.mark.parametrize(
    ("change", "line"),
    [
        (Change("h", "kernel.numa_balancing", "1", "0", "runtime"),
         "kernel.numa_balancing 1 -> 0 (runtime)"),
        (Change("h", "package nvidia-driver", None, "installed"),
         "package nvidia-driver: installed"),
        (Change("h", "GPU0 persistence mode"), "GPU0 persistence mode"),
    ],
)
def test_change_line(change, line):
    assert change.line() == line


def test_shorten():
    assert shorten("4096 87380 134217728") == "4096 87380 134217728"
    assert shorten("x" * 50, 10) == "xxxxxxx..."


def test_a_change_is_logged_once_per_host_and_run_and_kept(run, caplog):
    state, _ = run
    caplog.set_level(logging.INFO, logger="pyinfra")
    for _ in range(2):  # pyinfra evaluates an operation twice
        report_change("vm.swappiness", "60", "10", where="runtime")
    report_change("vm.dirty_ratio", "20", "10")
    assert logged(caplog) == ["[@local] change: vm.swappiness 60 -> 10 (runtime)",
                              "[@local] change: vm.dirty_ratio 20 -> 10"]
    assert [c.setting for c in changes_of(state, "@local")] == ["vm.swappiness", "vm.dirty_ratio"]
    assert changes_of(state, "other") == []
    # A new run starts with nothing kept.
    assert changes_of(State(Inventory((["@local"], {})), Config()), "@local") == []


def test_a_long_line_puts_where_on_a_line_of_its_own(run, caplog):
    caplog.set_level(logging.INFO, logger="pyinfra")
    where = "persisted in /etc/sysctl.d/90-gpunode.conf, applied at runtime with sysctl -w"
    report_change("net.ipv4.tcp_rmem", "4096 87380 6291456", "4096 87380 134217728", where)
    head, tail = logged(caplog)
    assert head == "[@local] change: net.ipv4.tcp_rmem 4096 87380 6291456 -> 4096 87380 134217728"
    assert tail == " " * len("@local") + "         (" + where + ")"


@pytest.mark.parametrize("run", [True], indirect=True)
def test_with_diff_a_file_change_is_shown_once(run, caplog):
    caplog.set_level(logging.INFO, logger="pyinfra")
    assert changes.diff_enabled() is True
    for _ in range(2):
        changes.log_file_diff("/etc/modules-load.d/gpunode.conf", "nvidia\n",
                              "nvidia\nnvidia_uvm\n")
    changes.log_file_diff("/etc/sysctl.d/90-gpunode.conf", None, "vm.swappiness = 10\n")
    assert logged(caplog) == [
        "[@local] Will modify /etc/modules-load.d/gpunode.conf",
        "      @@ -1 +1,2 @@", "        nvidia", "      + nvidia_uvm",
        "[@local] Will create /etc/sysctl.d/90-gpunode.conf",
        "      @@ -0,0 +1 @@", "      + vm.swappiness = 10",
    ]


def test_without_diff(run):
    assert changes.diff_enabled() is False


def test_outside_a_run_nothing_is_kept_or_deduplicated(caplog):
    """pyinfra's host proxy is set, its state is not (as in an operation fixture test)."""
    state = State(Inventory((["@local"], {})), Config())
    caplog.set_level(logging.INFO, logger="pyinfra")
    with ctx_host.use(state.inventory.get_host("@local")):
        assert changes._store() is None
        changes.log_file_diff("/etc/x", "a\n", "b\n")
        changes.log_file_diff("/etc/x", "a\n", "b\n")
    assert logged(caplog).count("[@local] Will modify /etc/x") == 2


def test_refuse_host_logs_each_problem_and_fails_the_host(run, caplog):
    state, host = run
    assert refuse_host([]) is False
    assert host in state.active_hosts
    caplog.set_level(logging.INFO, logger="pyinfra")
    assert refuse_host(["package nvidia-driver has no candidate", "kernel_pin not installed"])
    assert logged(caplog) == [
        "[@local] refused before any change: package nvidia-driver has no candidate",
        "[@local] refused before any change: kernel_pin not installed",
    ]
    assert host in state.failed_hosts and host not in state.active_hosts


def test_refuse_host_outside_a_host_is_a_bug():
    with pytest.raises(RuntimeError):
        refuse_host(["a problem"])

"""The fact cache and the one-command prefetch, on a real pyinfra State and a real @local host.

Every bundled value is compared with what pyinfra's own host.get_fact returns for the same
fact on the same host: the prefetch must change how many commands run, never what a fact says.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pyinfra.api import Config, FactBase, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_host, ctx_state
from pyinfra.facts.files import Directory, Sha1File
from pyinfra.facts.server import Hostname
from pyinfra.facts.systemd import SystemdEnabled, SystemdStatus

from gpunode.facts.apt import AptHolds
from gpunode.facts.bundle import FactBundle, FactRead, Section, lend_sections
from gpunode.facts.cache import (
    FactChange,
    _kwargs_match,
    cache_for,
    cached_fact,
    cached_read,
    merged_reads,
    prefetch,
    widest,
)
from gpunode.facts.cpu import CpuPower
from gpunode.facts.dpkg import InstalledPackages
from gpunode.facts.kernel_params import KernelParams
from gpunode.facts.kernels import InstalledKernels
from gpunode.facts.owned import OwnedFiles
from gpunode.facts.audit import LENDERS, AuditFacts
from tests.lab.pyinfra_cli import run_pyinfra


class NoNewline(FactBase):
    def command(self) -> str:
        return "printf 'first\\nlast-without-newline'"

    def process(self, output):
        return list(output)


class TrailingBlankLine(FactBase):
    def command(self) -> str:
        return "printf 'a\\n\\n'"

    def process(self, output):
        return list(output)


class ExitsEarly(FactBase):
    """A fact whose command calls exit: must not end the bundle's shell."""

    def command(self) -> str:
        return "echo before; exit 0; echo after"

    def process(self, output):
        return list(output)


class Fails(FactBase):
    def command(self) -> str:
        return "echo partial; exit 3"

    def process(self, output):
        return list(output)


class NeedsMissingTool(FactBase):
    requires_command = "gpunode-no-such-tool"
    default = dict

    def command(self) -> str:
        return "gpunode-no-such-tool --json"

    def process(self, output):
        return {"never": True}


class CantProcess(FactBase):
    def command(self) -> str:
        return "echo not-a-number"

    def process(self, output):
        return int(output[0])


@pytest.fixture()
def local(monkeypatch, tmp_path):
    """A connected @local host in a real State, with its remote commands counted."""
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    host = state.inventory.get_host("@local")
    calls: list = []
    original = type(host).run_shell_command

    def counted(self, *args, **kwargs):
        calls.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type(host), "run_shell_command", counted)
    with ctx_state.use(state), ctx_host.use(host):
        state.current_stage = StateStage.Prepare
        yield state, host, calls


def test_one_read_until_an_operation_changes_the_host(local):
    state, host, calls = local
    first = cached_fact(Hostname)
    assert cached_fact(Hostname) == first
    assert len(calls) == 1
    cache = cache_for(state)
    cache.invalidate(host.name)  # what a changing operation triggers
    cached_fact(Hostname)
    assert len(calls) == 2
    # What change detection read stays true when execution starts: no re-read.
    state.current_stage = StateStage.Execute
    cached_fact(Hostname)
    assert len(calls) == 2
    assert (cache.hits, cache.misses) == (2, 2)


def test_bundled_values_are_what_pyinfra_reads_one_by_one(local, tmp_path):
    state, host, calls = local
    owned = tmp_path / "owned.conf"
    owned.write_text("vm.swappiness = 10\n")
    reads = [
        FactRead(Hostname),
        FactRead(Sha1File, {"path": str(owned)}),
        FactRead(Sha1File, {"path": str(tmp_path / "absent.conf")}),
        FactRead(Directory, {"path": str(tmp_path)}),
        FactRead(KernelParams, {"sysctl_keys": ["vm.swappiness", "no.such.key"],
                                "modules": ["loop"]}),
        FactRead(CpuPower),
        FactRead(InstalledPackages, {"patterns": ["procps", "gpunode-absent"]}),
        FactRead(NoNewline), FactRead(TrailingBlankLine), FactRead(ExitsEarly),
        FactRead(NeedsMissingTool),
    ]
    one_by_one = [host.get_fact(r.fact, **r.kwargs) for r in reads]
    calls.clear()
    assert prefetch(reads) == len(reads)
    assert len(calls) == 1
    assert [cached_read(r) for r in reads] == one_by_one
    assert len(calls) == 1
    assert one_by_one[7] == ["first", "last-without-newline"]
    assert one_by_one[8] == ["a", ""]
    assert one_by_one[9] == ["before"]
    assert one_by_one[10] == {}


def test_a_read_the_bundle_cannot_answer_is_read_on_its_own(local):
    state, host, calls = local
    reads = [FactRead(Hostname), FactRead(Fails), FactRead(CantProcess)]
    assert prefetch(reads) == 1
    assert len(calls) == 1
    # pyinfra's own read of the failing facts, with its own error handling, comes later.
    assert cached_fact(Hostname) == host.get_fact(Hostname)
    assert len(calls) == 2
    with pytest.raises(Exception):  # noqa: B017 - pyinfra's error for an unprocessable fact
        cached_read(FactRead(CantProcess))
    assert len(calls) == 3


def test_prefetch_skips_what_is_cached_and_single_reads(local):
    state, host, calls = local
    cached_fact(Hostname)
    assert prefetch([FactRead(Hostname), FactRead(CpuPower)]) == 0  # one left: no bundle
    assert len(calls) == 1
    cache_for(state).invalidate(host.name)
    assert prefetch([FactRead(Hostname), FactRead(CpuPower)]) == 2
    assert len(calls) == 2


def test_a_wider_kernel_params_read_answers_narrower_ones(local):
    state, host, calls = local
    wide = cached_fact(KernelParams, sysctl_keys=["vm.swappiness", "kernel.pid_max"],
                       modules=["loop", "nvidia_peermem"])
    sysctls_only = cached_fact(KernelParams, sysctl_keys=["vm.swappiness"], modules=[])
    modules_only = cached_fact(KernelParams, sysctl_keys=[], modules=["loop"])
    assert len(calls) == 1
    assert sysctls_only is wide and modules_only is wide
    cached_fact(KernelParams, sysctl_keys=["vm.overcommit_memory"], modules=[])
    assert len(calls) == 2  # a key the wide read lacks: read on its own


def test_reads_of_a_few_paths_each_share_one_read_and_keep_their_own_values(local, tmp_path):
    """Three OwnedFiles reads become one section of all their paths; each read still gets
    what its own read returns (only its paths), and a write to one path drops that path's
    reads alone."""
    state, host, calls = local
    a, b, c = (str(tmp_path / name) for name in ("a.conf", "b.conf", "c.conf"))
    for path in (a, b):
        (tmp_path / path).write_text(path)
    reads = [FactRead(OwnedFiles, {"paths": [a]}), FactRead(OwnedFiles, {"paths": [b, c]}),
             FactRead(OwnedFiles, {"paths": [a, b]}), FactRead(Hostname)]
    one_by_one = [host.get_fact(r.fact, **r.kwargs) for r in reads]
    calls.clear()
    assert prefetch(reads) == len(reads)
    assert calls[0][0].get_raw_value().count("sha1sum") == 1
    assert [cached_read(r) for r in reads] == one_by_one
    assert len(calls) == 1
    _operation_ran(host, "write-b", FactChange(OwnedFiles, paths=[b]))
    cached_read(reads[0])
    assert len(calls) == 1  # a.conf's own read kept
    cached_read(reads[1])
    assert len(calls) == 2


def test_the_audit_borrows_the_sections_other_reads_of_the_bundle_run(local):
    """AuditFacts in a bundle with InstalledKernels, NvidiaSmi, ... runs none of their commands
    again, and its value is the one its own read gives."""
    state, host, calls = local
    own_read = host.get_fact(AuditFacts)
    reads = [FactRead(AuditFacts), *LENDERS.values(), FactRead(Hostname)]
    calls.clear()
    assert prefetch(reads) == len(reads)
    command = calls[0][0].get_raw_value()
    assert command.count(InstalledKernels().command()) == 1
    assert command.count("nvidia-smi -q -x") == 1
    assert cached_read(FactRead(AuditFacts)) == own_read
    assert len(calls) == 1


def test_a_borrower_whose_lender_failed_is_read_on_its_own():
    borrower = FactRead(AuditFacts, {"borrowed": ["kernels"]})
    reads = [borrower, LENDERS["kernels"]]
    sections = {0: Section(0, ["x"]), 1: Section(1, [])}
    lend_sections(reads, sections)
    assert 0 not in sections
    sections = {0: Section(0, ["x"]), 1: Section(0, ["k"])}
    lend_sections(reads, sections)
    assert sections[0].lines == ["x", "@@gpunode:kernels", "k", ""]


def test_merged_reads_and_the_widest_of_a_list():
    unit = [FactRead(SystemdStatus, {"services": [u]}) for u in ("a.service", "b.service")]
    assert merged_reads([*unit, FactRead(SystemdEnabled, {"services": ["a.service"]})]) == [
        FactRead(SystemdStatus, {"services": ["a.service", "b.service"]})]
    twins = [FactRead(OwnedFiles, {"paths": ["/x", "/y"]}),
             FactRead(OwnedFiles, {"paths": ["/y", "/x"]})]
    assert widest([*twins, FactRead(OwnedFiles, {"paths": ["/x"]})]) == twins[:1]


def test_bundle_fact_prints_its_reads_readably():
    assert repr(FactRead(Sha1File, {"path": "/etc/x"})) == "Sha1File(path='/etc/x')"
    assert FactBundle().process(["a", "b"]) == ["a", "b"]


@pytest.mark.parametrize("deploy", ["deploy/site.py", "deploy/host.py", "deploy/audit.py"])
def test_a_dry_run_reads_the_node_in_one_command(deploy):
    """`pyinfra @local DEPLOY --dry -v` on this machine: the prefetch bundle is the only fact
    read, also when a package must be installed (no read of the whole package list)."""
    run = run_pyinfra(deploy, "--dry", "-v", inventory="@local", timeout=300)
    assert run.returncode == 0, run.log
    assert run.loaded_facts() == ["gpunode.facts.bundle.FactBundle"], run.loaded_facts()


class _Meta:
    """An operation's meta as the cache asks it: finished, changed or not."""

    def __init__(self, changed: bool) -> None:
        self.changed = changed

    def is_complete(self) -> bool:
        return True

    def did_change(self) -> bool:
        return self.changed


def _operation_ran(host, op_hash: str, *changes_: FactChange, changed: bool = True) -> None:
    """What pyinfra's callbacks and the operation's changes() calls leave in the cache."""
    state = ctx_state.get()
    cache = cache_for(state)
    for change in changes_:
        cache.declare(host.name, op_hash, change)
    ops = SimpleNamespace(ops={host: {op_hash: SimpleNamespace(operation_meta=_Meta(changed))}})
    cache.operation_host_success(ops, host, op_hash)


def test_an_operation_drops_only_what_it_declared(local, tmp_path):
    state, host, calls = local
    a, b = str(tmp_path / "a.conf"), str(tmp_path / "b.conf")
    reads = [FactRead(Hostname), FactRead(Sha1File, {"path": a}), FactRead(Sha1File, {"path": b})]
    assert prefetch(reads) == 3 and len(calls) == 1
    _operation_ran(host, "write-a", FactChange(Sha1File, path=a))
    for read in reads:
        cached_read(read)
    assert len(calls) == 2  # only a.conf's sha1 read again
    _operation_ran(host, "no-change", FactChange(Hostname), changed=False)
    cached_read(reads[0])
    assert len(calls) == 2


def test_an_operation_that_declares_nothing_drops_every_value(local):
    state, host, calls = local
    reads = [FactRead(Hostname), FactRead(CpuPower)]
    prefetch(reads)
    _operation_ran(host, "apt-install")
    for read in reads:
        cached_read(read)
    assert len(calls) == 3


def test_narrow_reads_in_a_prefetch_outlive_a_change_to_another_part(local):
    """One section for CpuPower and one for KernelParams answer the operations' narrower
    reads; writing the cpuidle states leaves the governors cached, a sysctl write the
    modules, and the whole reads (the verify's) are read again."""
    state, host, calls = local
    kernel = FactRead(KernelParams, {"sysctl_keys": ["vm.swappiness"], "modules": ["loop"]})
    sysctls = FactRead(KernelParams, {"sysctl_keys": ["vm.swappiness"], "modules": []})
    modules = FactRead(KernelParams, {"sysctl_keys": [], "modules": ["loop"]})
    cpu, idle, freq = (FactRead(CpuPower), FactRead(CpuPower, part="cpuidle"),
                       FactRead(CpuPower, part="cpufreq"))
    reads = [kernel, sysctls, modules, cpu, idle, freq]
    assert prefetch(reads) == 6
    sections = calls[0][0].get_raw_value().split("@@gpunode-bundle:")
    assert sum("cpuidle/state" in section for section in sections) == 1  # one CpuPower read
    _operation_ran(host, "cstate", FactChange(CpuPower, part="cpuidle"))
    _operation_ran(host, "sysctl", FactChange(KernelParams, sysctl_keys=["vm.swappiness"]))
    cached_read(freq), cached_read(modules)
    assert len(calls) == 1
    cached_read(idle)
    cached_read(sysctls)
    assert len(calls) == 3
    assert prefetch(reads) == 2  # the verify's whole reads, in one command
    assert len(calls) == 4


def test_a_composite_fact_is_dropped_with_a_fact_it_includes():
    holds = FactChange(AptHolds)
    assert holds.touches(FactRead(InstalledKernels))
    assert holds.touches(FactRead(AuditFacts))
    assert not holds.touches(FactRead(CpuPower))


@pytest.mark.parametrize(("cached", "where", "touched"), [
    ({"path": "/a"}, {"path": "/a"}, True),
    ({"path": "/a"}, {"path": "/b"}, False),
    ({"sysctl_keys": ["x", "y"], "modules": []}, {"sysctl_keys": ["y"]}, True),
    ({"sysctl_keys": [], "modules": ["loop"]}, {"sysctl_keys": ["y"]}, False),
    ({"services": ["u"]}, {}, True),
    ({}, {"path": "/a"}, True),
])
def test_which_reads_a_change_touches(cached, where, touched):
    assert _kwargs_match(cached, where) is touched

"""The audit changes nothing: its operations yield no command, its facts hold no write.

- the one command gather_snapshot() runs (the snapshot's read) is checked against writes
  (redirection into a file, setpci with '=', sysctl -w, modprobe, echo into /sys,
  pct/systemctl/apt/nvidia-smi changes...);
- audit_node and verify_node run with pyinfra's context (a recording host, the Prepare and
  Execute stages) and yield nothing;
- `pyinfra @local deploy/audit.py` runs on this machine (no GPU, systemd or Proxmox) without
  a traceback, with the documented exit status.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_host, ctx_state

from gpunode.facts.audit import AuditFacts
from gpunode.facts.kernel_params import KernelParams
from gpunode.facts.node_read import BEGIN, END, NodeRead, sections
from gpunode.facts.sections import MARKER
from gpunode.facts.snapshot import Needs
from gpunode.profile.node import NodeProfile
from gpunode.roles.audit.run import audit_node
from gpunode.roles.audit.snapshot import gather_snapshot
from gpunode.roles.audit.verify import verify_node

ROOT = Path(__file__).resolve().parents[3]

WRITE_PATTERNS = {
    "redirection into a file": re.compile(r"\d*>>?\s*(?!/dev/null\b|&\d)(\S+)"),
    "setpci write": re.compile(r"\bsetpci\b[^;|&]*="),
    "sysctl -w": re.compile(r"\bsysctl\s+(-\w*\s+)*-w\b"),
    "module load/unload": re.compile(r"\b(modprobe|insmod|rmmod|nvidia-modprobe)\b"),
    "echo into /sys or /proc": re.compile(r"\becho\b[^;|&]*>\s*/(sys|proc)/"),
    "file writers": re.compile(r"(^|[;&|(]\s*)(tee|dd|rm|mv|cp|ln|touch|mkdir|chmod|chown|"
                               r"truncate|install)\s"),
    "sed -i": re.compile(r"\bsed\s+(-\w+\s+)*-i"),
    "pct change": re.compile(r"\bpct\s+(set|start|stop|reboot|shutdown|destroy|create|push|"
                             r"resize|restore|rollback|snapshot|delsnapshot|unlock|mount|"
                             r"migrate|move-volume)\b"),
    "systemctl change": re.compile(r"\bsystemctl\s+(start|stop|restart|reload|enable|disable|"
                                   r"mask|unmask|daemon-reload|daemon-reexec|set-property|"
                                   r"edit|kill|isolate)\b"),
    "nvidia-smi setting": re.compile(r"\bnvidia-smi\b[^;|&]*\s-(pm|pl|r|rac|ac|e|c|mig|lgc|rgc|"
                                     r"lmc|rmc|acp|am|caa)\b"),
    "package change": re.compile(r"\b(apt|apt-get|dpkg)\s+(install|remove|purge|upgrade|"
                                 r"dist-upgrade|autoremove|-i|-r|-P|--configure)\b"),
    "apt-mark change": re.compile(r"\bapt-mark\s+(hold|unhold|auto|manual)\b"),
    "boot change": re.compile(r"\b(update-grub|update-initramfs|grub-install|grub-mkconfig)\b|"
                              r"\bproxmox-boot-tool\s+(refresh|init|format|clean|reinit|"
                              r"kernel\s+(pin|unpin|add|remove))\b"),
    "power": re.compile(r"(^|[;&|]\s*)(reboot|shutdown|poweroff|halt)\b"),
}


def writes_in(command: str) -> list[str]:
    """Names of the write patterns a shell command matches."""
    # Quoted text (awk programs, echo'd markers) is data, not redirection.
    bare = re.sub(r"'[^']*'", "''", command)
    return [name for name, pattern in WRITE_PATTERNS.items() if pattern.search(bare)]


class RecordingHost:
    """A pyinfra host that records each fact's command and answers with the fact's parse of
    the given output (or of nothing); the snapshot's one read gets each of its parts' output
    from the part's own fact's."""

    name = "gpu-test"
    data = SimpleNamespace(get=lambda key, default=None: default)

    def __init__(self, outputs: dict[type, str] | None = None):
        self.outputs = outputs or {}
        self.commands: list[str] = []
        self.noops: list[str] = []
        self.logged: list[str] = []

    def get_fact(self, fact_cls, *args, **kwargs):
        fact = fact_cls()
        self.commands.append(str(fact.command(*args, **kwargs)))
        if fact_cls is NodeRead:
            return fact.process(self.node_output(kwargs.get("needs") or Needs()))
        return fact.process(self.outputs.get(fact_cls, "").splitlines())

    def node_output(self, needs: Needs) -> list[str]:
        lines: list[str] = []
        for name, (part, _) in sections(needs).items():
            lines += [f"{BEGIN}{name}", *self.outputs.get(part, "").splitlines(), f"{END}0"]
        return lines

    def noop(self, description: str) -> None:
        self.noops.append(description)

    def log_styled(self, message: str, **_style) -> None:
        self.logged.append(message)


def run_op(op, stage: StateStage, host: RecordingHost, state=None, **kwargs) -> list:
    state = state or SimpleNamespace()
    state.current_stage = stage
    with ctx_state.use(state), ctx_host.use(host):
        return list(op._inner(**kwargs))


def test_write_patterns_catch_writes():
    for command in ["sysctl -w vm.swappiness=10", "setpci -s 41:00.0 CAP_EXP+8.w=5000:7000",
                    "echo 1 > /sys/devices/system/cpu/cpu0/cpuidle/state3/disable",
                    "modprobe nvidia_peermem", "cat x > /etc/sysctl.d/90.conf",
                    "pct set 110 --memory 4096", "systemctl daemon-reexec",
                    "nvidia-smi -i 0 -pl 300", "proxmox-boot-tool kernel pin 6.8.12-4-pve",
                    "apt-get install -y nvidia-driver", "apt-mark hold linux-image-amd64",
                    "true; reboot", "sed -i s/a/b/ /etc/default/grub"]:
        assert writes_in(command), command
    for command in ["cat /proc/cmdline 2>/dev/null", "nvidia-smi -q -x 2>&1",
                    "command -v pct >/dev/null && pct list", "nvidia-smi nvlink -s",
                    "systemctl show --value -p DefaultLimitMEMLOCK"]:
        assert not writes_in(command), command


def test_every_fact_command_of_the_snapshot_is_read_only():
    host = RecordingHost()
    with ctx_host.use(host):
        gather_snapshot(NodeProfile())
    assert len(host.commands) == 1  # the snapshot's one read
    for command in host.commands:
        assert writes_in(command) == [], command


def test_audit_operation_yields_no_command_and_reports_once(tmp_path):
    host, state = RecordingHost(), SimpleNamespace()
    profile = NodeProfile()
    assert run_op(audit_node, StateStage.Prepare, host, state, profile=profile,
                  formats=("json",), report_dir=str(tmp_path)) == []
    reads = len(host.commands)
    assert reads == 1
    # Execution reuses the report of change detection: no second read of the node.
    assert run_op(audit_node, StateStage.Execute, host, state, profile=profile) == []
    assert len(host.commands) == reads
    assert (tmp_path / "gpu-test.json").exists()
    assert host.noops == ["audited: 0 open (P0/P1)"] * 2


def test_audit_operation_fails_the_run_on_p0_during_execution(caplog):
    output = (f"{MARKER}sysctl\n==> /proc/sys/vm/swappiness <==\n60\n\n"
              f"{MARKER}memlock_default\ninfinity\n\n")
    host, state = RecordingHost({KernelParams: output}), SimpleNamespace(failed_hosts=set())
    host.name = "gpu-bad"
    profile = NodeProfile()
    # Change detection (and --dry) only prints: the failure belongs to the run.
    assert run_op(audit_node, StateStage.Prepare, host, state, profile=profile) == []
    assert state.failed_hosts == set()
    # The run: no command at all; the verdict is logged once and the run will exit 1, the
    # host staying active (pyinfra goes on with the other hosts and ends with its results).
    assert run_op(audit_node, StateStage.Execute, host, state, profile=profile) == []
    assert run_op(audit_node, StateStage.Execute, host, state, profile=profile) == []
    assert len(host.commands) == 1
    assert state.failed_hosts == {host}
    said = [r.getMessage() for r in caplog.records if "audit failed" in r.getMessage()]
    assert said == ["gpu-bad: audit failed: 1 open (P0 1, P1 0): not ready (the report is above)"]
    # With -y there is no change detection: the first evaluation reads and fails.
    fresh, fresh_state = RecordingHost({KernelParams: output}), SimpleNamespace(failed_hosts=set())
    assert run_op(audit_node, StateStage.Execute, fresh, fresh_state, profile=profile) == []
    assert fresh_state.failed_hosts == {fresh}
    assert all(writes_in(c) == [] for c in host.commands + fresh.commands)


def test_verify_operation_yields_no_command():
    host = RecordingHost({AuditFacts: ""})
    host.name = "gpu-verify"
    assert run_op(verify_node, StateStage.Prepare, host, profile=NodeProfile()) == []
    assert host.commands == []
    assert run_op(verify_node, StateStage.Execute, host, profile=NodeProfile()) == []
    assert len(host.commands) == 1
    assert host.noops[-1] == "verified: 0 open"


def _pyinfra(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyinfra", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("mode", ["-y", "--dry"])
def test_pyinfra_at_local(mode, tmp_path):
    """This machine: no GPU, no systemd, no Proxmox. No traceback, the documented exit."""
    run = _pyinfra(mode, "@local", "deploy/audit.py", "--data", "report=both",
                   "--data", f"report_dir={tmp_path}")
    log = run.stdout + run.stderr
    assert "Traceback" not in log, log
    verdict = re.search(r"@local: (READY|NOT READY)", log)
    assert verdict, log
    for line in ("GPUs", "NVLink", "Proxmox VE", "GPU containers"):
        assert re.search(rf"\n  {line} +not present", log), line
    if mode == "--dry" or verdict.group(1) == "READY":
        assert run.returncode == 0, log
    else:
        assert run.returncode == 1, log
        assert "@local: audit failed:" in log
    assert sorted(p.name for p in tmp_path.iterdir()) == ["@local.json", "@local.md"]


def test_pyinfra_rejects_an_unknown_report_format():
    run = _pyinfra("-y", "@local", "deploy/audit.py", "--data", "report=yaml")
    assert run.returncode != 0
    assert "report='yaml': use json, md, both or none" in run.stdout + run.stderr

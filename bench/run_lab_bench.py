"""Lab bench: gpunode vs the same tuning as a plain Ansible playbook, on the lab node.

    python bench/run_lab_bench.py                 # everything, ~15 min on 2 cores (TCG guest)
    python bench/run_lab_bench.py --runs 3 --budget-s 900 --skip-host-fresh
    python bench/run_lab_bench.py --floor-only --runs 3   # converge, no-ops and the floor

Boots its own lab VM (run dir <lab cache>/run-bench, never the one `python -m lab up` or the
tests use) and measures, each time on a fresh overlay of the cached base image:

  VM 1  gpunode   deploy/site.py -y  first converge, then --runs no-op re-runs; then the
                  floor (below); then deploy/host.py -y  --host-runs no-op re-runs (runtime
                  tuning only)
  VM 2  Ansible   bench/ansible/tuning.yml  converge, then up to --runs no-op re-runs, then
                  gpunode deploy/site.py -y once on the Ansible-converged node (cross-check:
                  same tuning -> gpunode finds (almost) nothing to change)
  VM 3  gpunode   deploy/host.py -y  first converge (skipped with --skip-host-fresh, or when
                  the budget is spent)

Per run: wall time, remote commands (pyinfra: shell commands through Host.run_shell_command,
counted by bench/pyinfra_counted.py, plus SFTP uploads; Ansible: ssh executions, counted by
an ssh wrapper, one per module run with pipelining), changed operations/tasks, exit status,
the CPU-seconds of the run's own process tree here (pyinfra's: the controller) and the
CPU-seconds other QEMU guests on this machine used meanwhile.

The floor, on VM 1 after the site.py no-op runs, --runs times each (interleaved, median), with
OpenSSH and the lab's own connection settings (LabVM.ssh_argv, as inventories/lab.py pins them):
  (a) `ssh HOST true`: the connection alone (and (a'), the same with paramiko, pyinfra's
      SSH client: how far the two clients' connections differ);
  (b) the floor: a minimal read of the sources the one read covers, each tool once, in one ssh
      command (bench/floor.py, derived from the Needs the no-op's read was built with);
  (c) the one read alone: the exact command string pyinfra's SSH connector sent for the
      no-op's NodeRead (captured by bench/pyinfra_counted.py), replayed over ssh;
  (d) the controller's CPU-seconds of each no-op run.
and where the no-op's time goes: no-op - (c) (controller + pyinfra), (c) - (b) (the read's extra
processes), (a) (connection). --floor-only boots one VM, converges, runs the no-ops and the
floor, nothing else (no Ansible).

Prints a table and writes its JSON to --out (default: a new file in the temp dir). The VM is
stopped at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))
sys.path.insert(0, str(BENCH_DIR))

from benchlib import (  # noqa: E402
    REPO,
    ContentionMeter,
    Run,
    default_out,
    git_revision,
    machine_info,
    median,
    other_qemu_pids,
    parse_ansible,
    parse_pyinfra,
    pyinfra_version,
    stop_on_sigterm,
    timed,
    write_json,
)
from floor import (  # noqa: E402
    floor_command,
    floor_sources,
    section_seconds,
    stamped,
    uncovered,
)

from gpunode.facts.lock import LOCK_FILE  # noqa: E402
from gpunode.facts.node_read import BEGIN, END  # noqa: E402
from lab.image import cache_dir, ensure_image, lab_suite  # noqa: E402
from lab.vm import RUN_DIR_ENV, LabVM  # noqa: E402

ANSIBLE_DIR = BENCH_DIR / "ansible"
ANSIBLE_VENV = BENCH_DIR / ".venv-ansible"
PLAYBOOK = ANSIBLE_DIR / "tuning.yml"
COUNTED = BENCH_DIR / "pyinfra_counted.py"
SSH_WRAPPER = """#!/bin/sh
# bench: one line per ssh execution Ansible makes, then the real ssh.
{ printf '%s\n' "$*" | tail -c 160 | tr '\n' ' '; echo; } >> "$GPUNODE_BENCH_SSH_LOG"
exec ssh "$@"
"""


def ensure_ansible() -> Path:
    """bench/.venv-ansible with ansible-core (created on first use)."""
    playbook = ANSIBLE_VENV / "bin" / "ansible-playbook"
    if not playbook.exists():
        print(f"creating {ANSIBLE_VENV} (pip install ansible-core) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(ANSIBLE_VENV)], check=True)
        subprocess.run([str(ANSIBLE_VENV / "bin" / "pip"), "install", "-q", "ansible-core"],
                       check=True)
    return playbook


def ansible_version() -> str:
    out = subprocess.run([str(ANSIBLE_VENV / "bin" / "ansible"), "--version"],
                         capture_output=True, text=True).stdout
    return out.splitlines()[0] if out else "?"


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.started = time.monotonic()
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.logs = cache_dir() / "bench-logs" / stamp
        self.logs.mkdir(parents=True, exist_ok=True)
        self.vm = LabVM(cache_dir() / "run-bench", ensure_image())
        self.boots: list[dict] = []
        self.notes: list[str] = []

    # -- plumbing ------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def boot(self, purpose: str) -> None:
        """A fresh VM: stop the previous one, start on a new overlay, wait for SSH."""
        if self.vm.is_running():
            self.vm.stop()
        t0 = time.monotonic()
        state = self.vm.start()
        waited = self.vm.wait_ssh(420)
        self.boots.append({"purpose": purpose, "accel": state.accel,
                           "ssh_after_s": round(time.monotonic() - t0, 1),
                           "wait_ssh_s": round(waited, 1)})
        print(f"[{self.elapsed():6.0f}s] VM up for {purpose}: ssh after "
              f"{time.monotonic() - t0:.0f} s ({state.accel})", flush=True)

    def meter(self) -> ContentionMeter:
        own = {self.vm.state.pid} if self.vm.state else set()
        return ContentionMeter(own)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env[RUN_DIR_ENV] = str(self.vm.run_dir)
        env.pop("GPUNODE_LAB_REBOOT", None)  # the lab profile must not reboot here
        return env

    def pyinfra(self, label: str, deploy: str, tag: str) -> Run:
        argv = [sys.executable, str(COUNTED), "inventories/lab.py", deploy, "-y"]
        env = self.env()
        env["GPUNODE_BENCH_CAPTURE"] = str(self.logs / tag)  # its NodeRead: <tag>.read.sh ...
        run = parse_pyinfra(timed(label, argv, self.logs / f"{tag}.log", env=env,
                                  timeout=self.args.timeout_s, meter=self.meter()))
        self.report(run)
        return run

    def ansible(self, label: str, tag: str) -> Run:
        state = self.vm.state
        assert state is not None
        inventory = self.logs / "ansible-inventory.ini"
        template = (ANSIBLE_DIR / "inventory.ini.in").read_text()
        inventory.write_text(template.format(**vars(state)))
        wrapper = self.logs / "ssh-counted"
        if not wrapper.exists():
            wrapper.write_text(SSH_WRAPPER)
            wrapper.chmod(0o755)
        count_file = self.logs / f"{tag}.ssh"
        env = dict(os.environ)
        env.update({
            "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"),
            "ANSIBLE_SSH_EXECUTABLE": str(wrapper),
            "GPUNODE_BENCH_SSH_LOG": str(count_file),
            "ANSIBLE_NOCOLOR": "1",
        })  # fmt: skip
        argv = [str(ANSIBLE_VENV / "bin" / "ansible-playbook"), "-i", str(inventory),
                str(PLAYBOOK)]
        run = timed(label, argv, self.logs / f"{tag}.log", env=env,
                    timeout=self.args.timeout_s, meter=self.meter())
        run = parse_ansible(run, count_file)
        self.report(run)
        return run

    def report(self, run: Run) -> None:
        c = run.contention
        other = f", other VMs {c.other_vms} used {c.other_vm_cpu_s:.0f} CPU-s" if c else ""
        print(f"[{self.elapsed():6.0f}s] {run.label}: {run.wall_s:.1f} s, rc={run.rc}, "
              f"remote cmds={run.remote_commands}, changed={run.changed}, "
              f"CPU here {run.cpu_s} s{other}", flush=True)
        if run.rc != 0:
            print(f"          (log: {run.log})", flush=True)

    def repeat(self, make_run, runs: int, reserve_s: float) -> list[Run]:
        """Up to `runs` runs; stop early (after at least one) when the budget would be spent."""
        done: list[Run] = []
        for i in range(runs):
            if done and self.elapsed() + done[-1].wall_s + reserve_s > self.args.budget_s:
                self.notes.append(f"{done[-1].label.rsplit(' #', 1)[0]}: {len(done)} of {runs} "
                                  "runs (time budget)")
                break
            done.append(make_run(i + 1))
        return done

    # -- phases --------------------------------------------------------------------------------

    def gpunode_phase(self) -> dict:
        self.boot("gpunode site.py")
        converge = self.pyinfra("gpunode site.py first converge", "deploy/site.py",
                                "gpunode-site-converge")
        site_noop = self.repeat(
            lambda i: self.pyinfra(f"gpunode site.py no-op #{i}", "deploy/site.py",
                                   f"gpunode-site-noop-{i}"),
            self.args.runs, reserve_s=self.args.reserve_s)
        try:
            floor = self.floor_phase(site_noop)
        except Exception as exc:  # noqa: BLE001 - the floor must not cost the run's figures
            self.notes.append(f"floor: failed ({type(exc).__name__}: {exc})")
            floor = {"error": f"{type(exc).__name__}: {exc}"}
        host_noop = self.repeat(
            lambda i: self.pyinfra(f"gpunode host.py no-op #{i}", "deploy/host.py",
                                   f"gpunode-host-noop-{i}"),
            0 if self.args.floor_only else self.args.host_runs, reserve_s=self.args.reserve_s)
        return {"site_converge": converge.as_dict(),
                "site_noop": [r.as_dict() for r in site_noop],
                "site_noop_median_s": median([r.wall_s for r in site_noop]),
                "site_noop_cpu_median_s": median([r.cpu_s for r in site_noop
                                                  if r.cpu_s is not None]),
                "floor": floor,
                "host_noop": [r.as_dict() for r in host_noop],
                "host_noop_median_s": median([r.wall_s for r in host_noop])}

    def ssh_run(self, label: str, command: str, tag: str) -> Run:
        """One command over OpenSSH with the lab's connection settings (a fresh connection)."""
        run = timed(label, self.vm.ssh_argv(command), self.logs / f"{tag}.log",
                    timeout=self.args.timeout_s, meter=self.meter())
        self.report(run)
        return run

    def floor_phase(self, noops: list[Run]) -> dict:
        """(a) ssh true, (b) the floor read, (c) the one read replayed: --runs times each,
        interleaved; with (d), the no-ops' controller CPU, and where the no-op's time goes."""
        captured = [n for n in noops if Path(n.log).with_suffix(".read.sh").exists()
                    and Path(n.log).with_suffix(".needs.json").exists()]
        if not captured:
            self.notes.append("floor: no no-op run captured its NodeRead (see pyinfra_counted.py)")
            return {"error": "no NodeRead captured"}
        source = Path(captured[-1].log)
        one_read = source.with_suffix(".read.sh").read_text()
        needs = json.loads(source.with_suffix(".needs.json").read_text())
        floor = floor_command(needs)
        (self.logs / "floor-read.sh").write_text(floor + "\n")
        a, b, c, paramiko_true = [], [], [], []
        for i in range(1, max(1, self.args.runs) + 1):
            a.append(self.ssh_run(f"(a) ssh true #{i}", "true", f"floor-a-ssh-true-{i}"))
            # The same with paramiko, pyinfra's SSH client (lab.vm's, same key and known_hosts):
            # tells how far OpenSSH's connection differs from the one the no-op paid for.
            started = time.monotonic()
            self.vm.ssh("true", timeout=self.args.timeout_s)
            paramiko_true.append(round(time.monotonic() - started, 2))
            b.append(self.ssh_run(f"(b) floor read #{i}", floor, f"floor-b-read-{i}"))
            # The one read takes the node lock, held until its session ends (the holder polls
            # each second); the previous replay's, same run id, would pass as ours: wait it out.
            self.vm.ssh(f"flock -w 60 {LOCK_FILE} true", timeout=90)
            c.append(self.ssh_run(f"(c) one read #{i}", stamped(one_read),
                                  f"floor-c-one-read-{i}"))
        return floor_figures(
            noop_walls=[r.wall_s for r in noops], noop_cpu=[r.cpu_s for r in noops],
            a=a, b=b, c=c, paramiko_true=paramiko_true,
            details={
                "needs_from": str(source.with_suffix(".needs.json")),
                "one_read_command": str(source.with_suffix(".read.sh")),
                "one_read_command_chars": len(one_read),
                "one_read_sections": one_read.count(BEGIN),
                "one_read_sections_ended": [_ended_sections(Path(r.log)) for r in c],
                "one_read_section_median_s": section_medians(
                    [section_seconds(Path(r.log).read_text(errors="replace")) for r in c]),
                "floor_command": floor,
                "floor_sources": floor_sources(needs),
                "floor_not_covered": uncovered(needs),
                "floor_output_bytes": [Path(r.log).stat().st_size for r in b],
                "ssh": "OpenSSH, LabVM.ssh_argv (a new connection each; pyinfra uses paramiko)",
            })

    def ansible_phase(self) -> dict:
        ensure_ansible()
        self.boot("Ansible")
        converge = self.ansible("ansible tuning.yml converge", "ansible-converge")
        noop = self.repeat(
            lambda i: self.ansible(f"ansible tuning.yml no-op #{i}", f"ansible-noop-{i}"),
            self.args.runs, reserve_s=60.0)
        cross = self.pyinfra("gpunode site.py on the Ansible-converged node", "deploy/site.py",
                             "gpunode-after-ansible")
        return {"version": ansible_version(), "converge": converge.as_dict(),
                "noop": [r.as_dict() for r in noop],
                "noop_median_s": median([r.wall_s for r in noop]),
                "gpunode_site_after_ansible": cross.as_dict()}

    def host_fresh_phase(self) -> dict | None:
        if self.elapsed() + self.args.reserve_s > self.args.budget_s:
            self.notes.append("host.py first converge skipped (time budget)")
            return None
        self.boot("gpunode host.py")
        run = self.pyinfra("gpunode host.py first converge", "deploy/host.py",
                           "gpunode-host-converge")
        return {"host_converge": run.as_dict()}


def section_medians(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each section's median seconds over the (c) replays, slowest first."""
    names = {name for run in runs for name in run}
    medians = {n: median([run[n] for run in runs if n in run]) or 0.0 for n in names}
    return dict(sorted(medians.items(), key=lambda item: -item[1]))


def _ended_sections(log: Path) -> int:
    """Parts of the one read that ran to their end marker (all of them: the replay worked)."""
    return log.read_text(errors="replace").count(END)


def _sub(x: float | None, y: float | None) -> float | None:
    return round(x - y, 2) if x is not None and y is not None else None


def floor_figures(noop_walls: list[float], noop_cpu: list[float | None], a: list[Run],
                  b: list[Run], c: list[Run], paramiko_true: list[float] | None = None,
                  details: dict | None = None) -> dict:
    """The "floor" object of the JSON: each measure's runs and median, the ratio no-op / floor
    and where the rest of the no-op goes."""
    med = {name: median([r.wall_s for r in runs]) for name, runs in
           (("ssh_true", a), ("floor_read", b), ("one_read", c))}
    noop = median(noop_walls)
    cpu = median([x for x in noop_cpu if x is not None])
    paramiko = median(paramiko_true or [])
    # (c) over paramiko's connection instead of OpenSSH's: (c) - (a) + (a')
    one_read_paramiko = _sub(med["one_read"], _sub(med["ssh_true"], paramiko))
    return {
        "runs": len(b),
        "noop_median_s": noop,
        "noop_cpu_s": noop_cpu,
        "noop_cpu_median_s": cpu,
        "ssh_true_s": [r.wall_s for r in a], "ssh_true_median_s": med["ssh_true"],
        "floor_read_s": [r.wall_s for r in b], "floor_read_median_s": med["floor_read"],
        "one_read_s": [r.wall_s for r in c], "one_read_median_s": med["one_read"],
        "ssh_true_paramiko_s": paramiko_true or [], "ssh_true_paramiko_median_s": paramiko,
        "rc": {"ssh_true": [r.rc for r in a], "floor_read": [r.rc for r in b],
               "one_read": [r.rc for r in c]},
        "ratio_noop_floor": ratio(noop, med["floor_read"]),
        "where": {
            "controller_and_pyinfra_s": _sub(noop, med["one_read"]),  # no-op - (c)
            "controller_cpu_s": cpu,  # (d): of the above, pyinfra's own CPU here
            "read_extra_s": _sub(med["one_read"], med["floor_read"]),  # (c) - (b)
            "connection_s": med["ssh_true"],  # (a)
            "floor_past_connection_s": _sub(med["floor_read"], med["ssh_true"]),  # (b) - (a)
            # no-op - (c) with (c)'s connection paramiko's (a') instead of OpenSSH's (a)
            "controller_and_pyinfra_paramiko_s": _sub(noop, one_read_paramiko),
        },
        **(details or {}),
    }  # fmt: skip


GOALS = {"noop": 30, "converge": 8}  # issue #45 (#18 had 20x, 6x): Ansible / gpunode wall


def ratio(slow: float | None, fast: float | None) -> float | None:
    return round(slow / fast, 2) if slow and fast else None


def _median_commands(runs: list[dict] | None) -> float | None:
    counts = [r["remote_commands"] for r in runs or [] if r.get("remote_commands") is not None]
    return median(counts)


def print_table(result: dict) -> None:
    rows: list[tuple[str, dict | None, str]] = []
    g, a = result.get("gpunode") or {}, result.get("ansible") or {}

    def med_row(label: str, runs: list[dict]) -> None:
        if not runs:
            return
        walls = sorted(r["wall_s"] for r in runs)
        mid = sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]
        rows.append((f"{label} (median of {len(runs)})", mid,
                     " / ".join(f"{w:.1f}" for w in walls)))

    if g.get("site_converge"):
        rows.append(("gpunode site.py first converge", g["site_converge"], ""))
    med_row("gpunode site.py no-op", g.get("site_noop", []))
    if g.get("host_converge"):
        rows.append(("gpunode host.py first converge", g["host_converge"], ""))
    med_row("gpunode host.py no-op", g.get("host_noop", []))
    if a.get("converge"):
        rows.append(("Ansible tuning.yml converge", a["converge"], ""))
    med_row("Ansible tuning.yml no-op", a.get("noop", []))
    if a.get("gpunode_site_after_ansible"):
        rows.append(("gpunode site.py after Ansible", a["gpunode_site_after_ansible"], ""))

    print()
    print(f"{'run':46} {'wall s':>7} {'CPU s':>6} {'remote cmds':>11} {'uploads':>7} "
          f"{'changed':>7} {'rc':>3} {'other VMs CPU-s':>15} {'load 1m':>11}  all runs")
    for label, run, walls in rows:
        c = run.get("contention") or {}
        load = f"{c.get('load_avg_1m_start', '-')}-{c.get('load_avg_1m_end', '-')}"
        cpu = run.get("cpu_s")
        print(f"{label:46} {run['wall_s']:7.1f} {'-' if cpu is None else f'{cpu:.1f}':>6} "
              f"{str(run.get('remote_commands')):>11} "
              f"{str(run.get('uploads') if run.get('uploads') is not None else '-'):>7} "
              f"{str(run.get('changed')):>7} {run['rc']:>3} "
              f"{str(c.get('other_vm_cpu_s', '-')):>15} {load:>11}  {walls}")
    r = result.get("ratios") or {}
    if a:  # the ratios need the Ansible side (not with --skip-ansible, --floor-only)
        print(f"\nAnsible / gpunode wall time: converge {r.get('converge')}x (goal >= "
              f"{GOALS['converge']}x), no-op {r.get('noop')}x (goal >= {GOALS['noop']}x)")
        print(f"Ansible / gpunode remote commands: converge {r.get('converge_commands')}x, "
              f"no-op {r.get('noop_commands')}x; ", end="")
    else:
        print()
    print(f"gpunode no-op commands: {r.get('gpunode_noop_commands')} (goal: 1)")
    print_floor(g.get("floor"))
    for note in result.get("notes", []):
        print(f"note: {note}")


def print_floor(floor: dict | None) -> None:
    """The floor under gpunode's no-op (see the module docstring)."""
    if not floor or "runs" not in floor:
        return
    w = floor["where"]

    def fig(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f} s"

    def runs(key: str) -> str:
        return " / ".join(f"{x:.2f}" for x in floor.get(key) or [] if x is not None)

    print(f"\nThe floor (same VM, after the no-ops; OpenSSH with the lab's settings, median of "
          f"{floor['runs']}):")
    for label, value, key in (
        ("gpunode site.py no-op", floor["noop_median_s"], ""),
        ("(a) ssh HOST true: the connection", floor["ssh_true_median_s"], "ssh_true_s"),
        ("(b) floor: minimal read, each tool once", floor["floor_read_median_s"],
         "floor_read_s"),
        ("(c) the one read's own command over ssh", floor["one_read_median_s"], "one_read_s"),
        ("(a') ssh true with paramiko (pyinfra's client)", floor["ssh_true_paramiko_median_s"],
         "ssh_true_paramiko_s"),
        ("(d) controller CPU of a no-op (pyinfra)", floor["noop_cpu_median_s"], "noop_cpu_s"),
    ):
        print(f"  {label:48} {fig(value):>9}  {runs(key) if key else ''}")
    slowest = list((floor.get("one_read_section_median_s") or {}).items())[:8]
    if slowest:
        print("  (c)'s slowest sections on the guest: "
              + ", ".join(f"{name} {s:.2f} s" for name, s in slowest))
    print(f"  no-op / floor: {floor['ratio_noop_floor']}x; where the rest goes: "
          f"no-op - (c) = {fig(w['controller_and_pyinfra_s'])} (controller + pyinfra, "
          f"{fig(w['controller_cpu_s'])} of it CPU here), (c) - (b) = {fig(w['read_extra_s'])} "
          f"(the read's extra processes), (a) = {fig(w['connection_s'])} (connection); "
          f"no-op - (c) with paramiko's connection: "
          f"{fig(w['controller_and_pyinfra_paramiko_s'])}")
    bad = {k: v for k, v in floor["rc"].items() if any(v)}
    if bad:
        print(f"  WARNING: non-zero exit status {bad} (logs: floor-*.log)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="no-op re-runs per tool (median)")
    parser.add_argument("--host-runs", type=int, default=1, help="host.py no-op re-runs")
    parser.add_argument("--budget-s", type=float, default=900.0,
                        help="stop repeating no-op runs when the whole bench would pass this")
    parser.add_argument("--reserve-s", type=float, default=300.0,
                        help="time kept back for the phases still to come")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per command")
    parser.add_argument("--skip-gpunode", action="store_true")
    parser.add_argument("--skip-ansible", action="store_true")
    parser.add_argument("--skip-host-fresh", action="store_true")
    parser.add_argument("--floor-only", action="store_true",
                        help="one VM: converge, the --runs no-ops and the floor (no Ansible, "
                             "no host.py)")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON to write (default: a new file in the temp dir; "
                             "bench/results/lab.json to record a figure)")
    args = parser.parse_args(argv)
    args.out = args.out or default_out("lab")
    stop_on_sigterm()

    if shutil.which("qemu-system-x86_64") is None:
        print("qemu-system-x86_64 missing: run `make lab` once (it installs the lab's tools)")
        return 2
    bench = Bench(args)
    before = other_qemu_pids(set())
    result: dict = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "gpunode_revision": git_revision(),
        "pyinfra": pyinfra_version(),
        "suite": lab_suite(),  # the lab guest's Debian (GPUNODE_LAB_SUITE)
        "other_qemu_at_start": len(before),
        "logs": str(bench.logs),
        "floor_only": args.floor_only,
    }
    print(f"lab bench on a Debian {result['suite']} guest: logs in {bench.logs}; "
          f"other QEMU guests running now: {len(before)}",
          flush=True)
    if args.floor_only:  # VM 1 only, without host.py's no-ops (gpunode_phase)
        args.skip_gpunode, args.skip_ansible, args.skip_host_fresh = False, True, True
    try:
        if not args.skip_gpunode:
            result["gpunode"] = bench.gpunode_phase()
        if not args.skip_ansible:
            result["ansible"] = bench.ansible_phase()
        if not args.skip_gpunode and not args.skip_host_fresh:
            fresh = bench.host_fresh_phase()
            if fresh:
                result["gpunode"].update(fresh)
    finally:
        bench.vm.stop()
        result["boots"] = bench.boots
        result["notes"] = bench.notes
        result["other_qemu_at_end"] = len(other_qemu_pids(set()))
        result["total_s"] = round(bench.elapsed(), 1)
        g, a = result.get("gpunode") or {}, result.get("ansible") or {}
        result["ratios"] = {
            "converge": ratio((a.get("converge") or {}).get("wall_s"),
                              (g.get("site_converge") or {}).get("wall_s")),
            "noop": ratio(a.get("noop_median_s"), g.get("site_noop_median_s")),
            "converge_commands": ratio((a.get("converge") or {}).get("remote_commands"),
                                       (g.get("site_converge") or {}).get("remote_commands")),
            "noop_commands": ratio(_median_commands(a.get("noop")),
                                   _median_commands(g.get("site_noop"))),
            "gpunode_noop_commands": _median_commands(g.get("site_noop")),
            "goals": GOALS,
        }
        write_json(args.out, result)
        print_table(result)
        print(f"\nwrote {args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out}"
              f" ({result['total_s']:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

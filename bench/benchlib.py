"""Helpers shared by the bench scripts: timed subprocesses, pyinfra/Ansible output parsing,
and a record of the CPU that other QEMU guests took while a measurement ran.

The machine the figures come from has 2 cores and may run other lab VMs (the test suite's):
every timed run records how many CPU-seconds other qemu-system processes used during it, so a
slow figure can be told apart from a slow tool.
"""

from __future__ import annotations

import json
import os
import platform
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH_LINE = re.compile(r"^BENCH (\{.*\})\s*$", re.MULTILINE)
GRAND_TOTAL = re.compile(r"Grand total\s+(\d+)\s+(\d+|-)\s+(\d+|-)\s+(\d+|-)")
PLAY_RECAP = re.compile(
    r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.MULTILINE
)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def own_lab_vm(suite: str, name: str) -> tuple[Any, Path]:
    """A lab VM of the bench's own (not booted): the suite's cached image, a fresh run dir
    <lab cache>/NAME/run (never the one `python -m lab up` or the tests use); (vm, NAME dir)."""
    sys.path.insert(0, str(REPO))
    from lab.image import SUITE_ENV, cache_dir, ensure_host_tools, ensure_image
    from lab.vm import RUN_DIR_ENV, LabVM
    os.environ[SUITE_ENV] = suite
    ensure_host_tools()
    work = cache_dir() / name
    shutil.rmtree(work, ignore_errors=True)
    os.environ[RUN_DIR_ENV] = str(work / "run")
    return LabVM(work / "run", ensure_image()), work


def stop_on_sigterm() -> None:
    """SIGTERM (and SIGHUP) raise SystemExit, so a script's finally: still stops its VMs/sshds."""

    def _exit(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGHUP, _exit)


def _int(text: str) -> int:
    return 0 if text == "-" else int(text)


def qemu_cpu_seconds(exclude: set[int] | None = None) -> dict[int, float]:
    """CPU-seconds (user + system) used so far by each running qemu-system process."""
    out: dict[int, float] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or (exclude and int(proc.name) in exclude):
            continue
        try:
            if not (proc / "comm").read_text().startswith("qemu-system"):
                continue
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(proc.name)] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return out


def other_qemu_pids(own: set[int]) -> list[int]:
    return sorted(pid for pid in qemu_cpu_seconds() if pid not in own)


@dataclass
class Contention:
    """What other QEMU guests took from the machine while one measurement ran."""

    other_vms: int
    other_vm_cpu_s: float
    load_avg_1m_end: float
    load_avg_1m_start: float | None = None


class ContentionMeter:
    """Samples other qemu processes' CPU time around a measurement (own VM pids excluded)."""

    def __init__(self, own_pids: set[int] | None = None) -> None:
        self.own = own_pids or set()
        self.before: dict[int, float] = {}
        self.load_start: float | None = None

    def start(self) -> None:
        self.before = qemu_cpu_seconds(self.own)
        self.load_start = round(os.getloadavg()[0], 2)

    def stop(self) -> Contention:
        after = qemu_cpu_seconds(self.own)
        used = sum(max(0.0, cpu - self.before.get(pid, 0.0)) for pid, cpu in after.items())
        return Contention(
            other_vms=len(set(after) | set(self.before)),
            other_vm_cpu_s=round(used, 1),
            load_avg_1m_end=round(os.getloadavg()[0], 2),
            load_avg_1m_start=self.load_start,
        )


@dataclass
class Run:
    """One timed command."""

    label: str
    argv: list[str]
    wall_s: float
    rc: int
    log: str
    remote_commands: int | None = None
    uploads: int | None = None
    facts: dict[str, int] = field(default_factory=dict)
    fact_cache: dict | None = None
    changed: int | None = None
    unchanged: int | None = None
    errors: int | None = None
    contention: Contention | None = None
    cpu_s: float | None = None
    """User + system CPU-seconds of the command's process tree on this machine (the controller:
    pyinfra's whole CLI process, or the local ssh client), from RUSAGE_CHILDREN."""

    def as_dict(self) -> dict:
        return asdict(self)


def timed(
    label: str,
    argv: list[str],
    log: Path,
    env: dict[str, str] | None = None,
    timeout: float = 900.0,
    meter: ContentionMeter | None = None,
    cwd: Path = REPO,
) -> Run:
    """Run argv (stdout+stderr to log), return its wall time, exit status, CPU time here and the
    log path."""
    log.parent.mkdir(parents=True, exist_ok=True)
    if meter:
        meter.start()
    cpu_before = _children_cpu_s()
    started = time.monotonic()
    with log.open("w") as out:
        try:
            rc = subprocess.run(
                argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, timeout=timeout,
            ).returncode  # fmt: skip
        except subprocess.TimeoutExpired:
            rc = 124
    wall = round(time.monotonic() - started, 2)
    run = Run(label=label, argv=argv, wall_s=wall, rc=rc, log=str(log),
              cpu_s=round(_children_cpu_s() - cpu_before, 2))
    if meter:
        run.contention = meter.stop()
    return run


def _children_cpu_s() -> float:
    """User + system time of this process's waited-for children so far (the bench runs one at a
    time, so the delta around a run is that run's)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def parse_pyinfra(run: Run) -> Run:
    """Fill counts from pyinfra's results table and bench/pyinfra_counted.py's BENCH line."""
    text = Path(run.log).read_text(errors="replace")
    bench = BENCH_LINE.findall(text)
    if bench:
        data = json.loads(bench[-1])
        run.remote_commands = data.get("remote_commands")
        run.uploads = data.get("uploads")
        run.facts = data.get("facts") or {}
        run.fact_cache = data.get("fact_cache")
    total = GRAND_TOTAL.search(text)
    if total:
        run.changed, run.errors, run.unchanged = (_int(total.group(i)) for i in (2, 3, 4))
    return run


def parse_ansible(run: Run, ssh_count_file: Path | None) -> Run:
    """Fill counts from the PLAY RECAP and the ssh wrapper's log (one line per ssh exec)."""
    text = Path(run.log).read_text(errors="replace")
    recap = PLAY_RECAP.findall(text)
    if recap:
        _, ok, changed, unreachable, failed = recap[-1]
        run.changed, run.errors = int(changed), int(failed) + int(unreachable)
        run.unchanged = int(ok) - int(changed)
    if ssh_count_file and ssh_count_file.exists():
        run.remote_commands = len(ssh_count_file.read_text().splitlines())
    return run


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def machine_info() -> dict:
    """Cores, memory, CPU model, kernel: enough to say where a figure came from."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        mem_kib = 0
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "cpu": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "pid1": _pid1(),
    }


def _pid1() -> str:
    try:
        return Path("/proc/1/comm").read_text().strip()
    except OSError:
        return "?"


def pyinfra_version() -> str:
    try:
        from importlib.metadata import version

        return version("pyinfra")
    except Exception:  # noqa: BLE001 - informational only
        return "?"


def git_revision() -> str:
    """HEAD (+dirty) of the tree measured; $GPUNODE_BENCH_REVISION names a snapshot copy."""
    if os.environ.get("GPUNODE_BENCH_REVISION"):
        return os.environ["GPUNODE_BENCH_REVISION"]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, capture_output=True, text=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def default_out(name: str) -> Path:
    """Where a bench writes its JSON without --out: a new file in the temp dir, never a tracked
    file under bench/results/ (record a figure there on purpose, with --out)."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    return Path(tempfile.gettempdir()) / f"gpunode-bench-{name}-{stamp}.json"


def write_json(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    tmp.replace(path)

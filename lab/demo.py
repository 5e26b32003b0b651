"""`python -m lab demo` (make lab): the whole gpunode story on the lab node, in one command.

Host tools, image (built once, then cached), boot (or reuse) the guest, show the plan (--dry),
apply, reboot through the deploy, re-run (expect zero changes), then the read-only audit. Each
step says "step N of M" and the time so far; pyinfra's output is shown and kept, whole, in a log
file per step (<run dir>/demo/); each step's wall time is printed at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from lab.image import ensure_host_tools, ensure_image
from lab.progress import Heartbeat, elapsed, stream_lines
from lab.vm import RUN_DIR_ENV, LabNotRunning, LabVM, default_run_dir

REPO = Path(__file__).resolve().parents[1]
INVENTORY = "inventories/lab.py"
STEPS = 7
METRICS_FILE = "/var/lib/prometheus/node-exporter/gpunode.prom"  # gpunode-verify.timer's


def pyinfra_command(*args: str) -> list[str]:
    local = Path(sys.executable).with_name("pyinfra")
    return [str(local) if local.exists() else "pyinfra", INVENTORY, *args]


class Steps:
    """'step N of M' banners with the time since the demo started."""

    def __init__(self, total: int = STEPS) -> None:
        self.total = total
        self.number = 0
        self.started = time.monotonic()

    def begin(self, title: str) -> float:
        self.number += 1
        so_far = elapsed(time.monotonic() - self.started)
        print(f"\n===== step {self.number} of {self.total}: {title} ({so_far} so far) =====",
              flush=True)
        return time.monotonic()


def run_logged(argv: list[str], env: dict[str, str], log: Path, what: str) -> int:
    """Run argv with its output on this terminal and in log; a heartbeat while it is silent."""
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"(full output: {log})", flush=True)
    with log.open("w") as out, Heartbeat(what) as beat:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace")
        assert proc.stdout is not None
        stream_lines(proc.stdout, out, beat, lambda line: line or " ", relabel=False)
        return proc.wait()


def count_rerun_changes(env: dict[str, str], log: Path) -> int:
    """Re-run with --json (the JSON on stdout, pyinfra's log in log) and count the operations
    that changed something."""
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"(full output: {log})", flush=True)
    with log.open("w") as err, Heartbeat("re-run"):
        proc = subprocess.run(pyinfra_command("deploy/site.py", "-y", "--json"), cwd=REPO,
                              env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=err, text=True)
    try:
        data = json.loads(proc.stdout or "{}")
    except json.JSONDecodeError:
        data = {}
    results = (data.get("results") or {}).get("operations", [])
    changed = [op["name"] for op in results if op["success"]]
    print(f"re-run changed {len(changed)} operation(s): {changed or 'none'}", flush=True)
    if proc.returncode:
        print(f"re-run failed (exit {proc.returncode}): see {log}", flush=True)
        return max(1, len(changed))
    return len(changed)


def ensure_vm(run_dir: Path | None, steps: Steps) -> LabVM:
    steps.begin("lab image (built once, then cached)")
    image = ensure_image()
    print(f"image: {image.path}", flush=True)
    steps.begin("boot the lab VM (TCG: about a minute)")
    try:
        vm = LabVM.attach(run_dir)
        print(f"reusing the running lab VM ({vm.run_dir})", flush=True)
        return vm
    except LabNotRunning:
        pass
    vm = LabVM(run_dir, image)
    vm.start()
    with Heartbeat("booting: waiting for SSH"):
        waited = vm.wait_ssh(420)
    print(f"ssh ready after {waited:.0f} s (console: {vm.run_dir / 'console.log'})", flush=True)
    return vm


def run_demo(run_dir: Path | None = None) -> int:
    steps = Steps()
    steps.begin("host tools (QEMU, debootstrap: apt-get when missing)")
    ensure_host_tools()
    vm = ensure_vm(run_dir, steps)
    # The lab profile with gpunode-verify.timer: drift shows in the node's metrics file.
    env = {**os.environ, RUN_DIR_ENV: str(vm.run_dir), "GPUNODE_LAB_VERIFY_TIMER": "1"}
    logs = (run_dir or default_run_dir()).resolve() / "demo"
    timings: dict[str, float] = {}

    def pyinfra_step(key: str, title: str, args: list[str], step_env: dict[str, str]) -> int:
        started = steps.begin(title)
        rc = run_logged(pyinfra_command(*args), step_env, logs / f"{steps.number}-{key}.log",
                        title)
        timings[key] = time.monotonic() - started
        return rc

    if rc := pyinfra_step("dry-run", "plan: pyinfra deploy/site.py --dry",
                          ["deploy/site.py", "--dry"], env):
        return rc
    reboot_env = {**env, "GPUNODE_LAB_REBOOT": "1"}
    if rc := pyinfra_step("apply", "apply: pyinfra -y deploy/site.py (reboot allowed)",
                          ["deploy/site.py", "-y"], reboot_env):
        return rc
    started = steps.begin("re-run: pyinfra -y deploy/site.py (expect zero changes)")
    changes = count_rerun_changes(reboot_env, logs / f"{steps.number}-re-run.log")
    timings["re-run"] = time.monotonic() - started
    pyinfra_step("audit", "audit: pyinfra -y deploy/audit.py", ["deploy/audit.py", "-y"], env)
    print(f"\n===== done in {elapsed(time.monotonic() - steps.started)} =====")
    for step, seconds in timings.items():
        print(f"  {step:15} {seconds:6.1f} s")
    print(f"  re-run changes  {changes}\n  logs            {logs}\n"
          f"  drift metrics   {sys.executable} -m lab ssh cat {METRICS_FILE}\n"
          "  stop the guest: make lab-down")
    return 0 if changes == 0 else 1

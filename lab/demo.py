"""`python -m lab demo` (make lab): the whole gpunode story on the lab node, in one command.

Boot (or reuse) the guest, show the plan (--dry), apply, reboot through the deploy, re-run
(expect zero changes), then the read-only audit. Each step's wall time is printed at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from lab.image import ensure_host_tools, ensure_image
from lab.vm import RUN_DIR_ENV, LabNotRunning, LabVM

REPO = Path(__file__).resolve().parents[1]
INVENTORY = "inventories/lab.py"


def pyinfra_command(*args: str) -> list[str]:
    local = Path(sys.executable).with_name("pyinfra")
    return [str(local) if local.exists() else "pyinfra", INVENTORY, *args]


def banner(text: str) -> None:
    print(f"\n===== {text} =====", flush=True)


def run_step(title: str, args: list[str], env: dict[str, str]) -> tuple[int, float]:
    """Run pyinfra with its normal output on this terminal; (exit status, seconds)."""
    banner(title)
    started = time.monotonic()
    proc = subprocess.run(pyinfra_command(*args), cwd=REPO, env=env, stdin=subprocess.DEVNULL)
    return proc.returncode, time.monotonic() - started


def count_rerun_changes(env: dict[str, str]) -> tuple[int, float]:
    """Re-run with --json and count operations that changed something."""
    banner("re-run: pyinfra -y deploy/site.py (expect zero changes)")
    started = time.monotonic()
    proc = subprocess.run(pyinfra_command("deploy/site.py", "-y", "--json"), cwd=REPO, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True)
    sys.stderr.write(proc.stderr[-4000:])
    results = (json.loads(proc.stdout or "{}").get("results") or {}).get("operations", [])
    changed = [op["name"] for op in results if op["success"]]
    print(f"re-run changed {len(changed)} operation(s): {changed or 'none'}", flush=True)
    return len(changed), time.monotonic() - started


def ensure_vm(run_dir: Path | None) -> LabVM:
    try:
        return LabVM.attach(run_dir)
    except LabNotRunning:
        banner("boot the lab VM")
        vm = LabVM(run_dir, ensure_image())
        vm.start()
        print(f"ssh ready after {vm.wait_ssh(420):.0f} s", flush=True)
        return vm


def run_demo(run_dir: Path | None = None) -> int:
    ensure_host_tools()
    vm = ensure_vm(run_dir)
    env = {**os.environ, RUN_DIR_ENV: str(vm.run_dir)}
    timings: dict[str, float] = {}
    rc, timings["dry-run"] = run_step("plan: pyinfra deploy/site.py --dry", ["deploy/site.py",
                                      "--dry"], env)
    if rc:
        return rc
    reboot_env = {**env, "GPUNODE_LAB_REBOOT": "1"}
    rc, timings["apply + reboot"] = run_step("apply: pyinfra -y deploy/site.py (reboot allowed)",
                                             ["deploy/site.py", "-y"], reboot_env)
    if rc:
        return rc
    changes, timings["re-run"] = count_rerun_changes(reboot_env)
    _, timings["audit"] = run_step("audit: pyinfra -y deploy/audit.py", ["deploy/audit.py", "-y"],
                                   env)
    banner("summary")
    for step, seconds in timings.items():
        print(f"  {step:15} {seconds:6.1f} s")
    print(f"  re-run changes  {changes}\n  stop the guest: make lab-down")
    return 0 if changes == 0 else 1

"""What gpunode costs a node between deploys (issue 45): the boot unit and the verify timer.

    python bench/boot_and_timer.py [--suite trixie|bookworm] [--runs 5] [--out FILE]

Boots its own lab VM (a fresh overlay of the cached image, run dir <lab cache>/boot-bench),
converges deploy/site.py -y with the verify timer on, reboots (the cmdline goes live), then reads
on the guest:

1. **Boot to ready**: when gpunode-tune.service (the boot unit: MaxReadReq, ACS, C-states,
   governor, GPU settings) became active, in seconds since the kernel started (systemd's
   ActiveEnterTimestampMonotonic), and its own cost: active minus the start of its run
   (InactiveExitTimestampMonotonic), beside `systemd-analyze`'s whole boot. The unit is ordered
   Before=pve-guests.service: on Proxmox no container starts before it is done, so its own cost
   is what gpunode adds before the first container.
2. **The verify timer's cost per run**: `systemctl start gpunode-verify.service` --runs times;
   the run's wall from systemd's timestamps (ExecMainStart -> ExecMainExit) and the script's
   own wall and CPU (bash's `time` over the same script, user + system of its processes).
3. **Their floors**, --runs times each, median: what each must read at the least, each tool
   once in one shell: the boot unit's (setpci of the matched devices' Device Control, the
   cpuidle `disable` and `scaling_governor` files), the verify's (the same plus the sysctl
   files, /proc/modules, /proc/cmdline, the manager's DefaultLimitMEMLOCK, the kernel
   packages' holds and this boot's kernel log).

Prints the figures and writes them as JSON (default bench/results/boot-timer-SUITE-DATE.json).
Figures here are a TCG guest's: slower than a real node, each against its floor on the same
guest.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchlib import own_lab_vm  # noqa: E402

from gpunode.roles.host_tuning import BOOT_SCRIPT, BOOT_UNIT  # noqa: E402
from gpunode.roles.verify_timer import VERIFY_SCRIPT, VERIFY_SERVICE  # noqa: E402
from lab.profile import LAB_SELECTOR  # noqa: E402
from lab.vm import LabVM  # noqa: E402
from tests.lab.pyinfra_cli import run_pyinfra  # noqa: E402

BOOT_TIMEOUT_S = 900.0
DEVICES = f"{LAB_SELECTOR['vendor']}:{LAB_SELECTOR['device']}"
CPU = "/sys/devices/system/cpu"
BOOT_FLOOR = (f"setpci -d {DEVICES} CAP_EXP+08.w; "
              f"cat {CPU}/cpu*/cpuidle/state*/disable {CPU}/cpu*/cpufreq/scaling_governor "
              "2>/dev/null; true")
VERIFY_FLOOR = (f"{BOOT_FLOOR}; cat /proc/sys/kernel/* /proc/sys/vm/* /proc/modules "
                "/proc/cmdline >/dev/null 2>&1; systemctl show --value -p DefaultLimitMEMLOCK; "
                "dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n' 'linux-image-*'; "
                "journalctl -k -b -q --no-pager | grep -c NVRM; true")
TIMES = "TIMEFORMAT='%R %U %S'"


def guest(vm: LabVM, command: str, timeout: float = 120) -> str:
    rc, out, err = vm.ssh(command, timeout=timeout)
    if rc != 0:
        raise RuntimeError(f"{command!r} failed ({rc}): {err.strip()[-400:]}")
    return out


def unit_times(vm: LabVM, unit: str) -> dict[str, float]:
    """systemd's monotonic timestamps of a unit, in seconds (0: not reached)."""
    props = ("InactiveExitTimestampMonotonic", "ActiveEnterTimestampMonotonic",
             "ExecMainStartTimestampMonotonic", "ExecMainExitTimestampMonotonic")
    out = guest(vm, f"systemctl show {unit} " + " ".join(f"-p {p}" for p in props))
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return {k: int(values.get(k) or 0) / 1e6 for k in props}


def timed_in_guest(vm: LabVM, command: str) -> tuple[float, float]:
    """(wall s, CPU s: user + system) of a command in the guest, by bash's `time`."""
    script = f"{TIMES}; {{ time ( {{ {command} ; }} >/dev/null 2>&1 ) ; }} 2>&1"
    out = guest(vm, f"bash -c {shlex.quote(script)} 2>&1 | tail -n 1")
    wall, user, system = (float(x) for x in out.split()[-3:])
    return wall, user + system


def median_of(vm: LabVM, command: str, runs: int) -> dict[str, float]:
    samples = [timed_in_guest(vm, command) for _ in range(runs)]
    return {"wall_s": round(statistics.median(s[0] for s in samples), 3),
            "cpu_s": round(statistics.median(s[1] for s in samples), 3)}


def boot_figures(vm: LabVM) -> dict[str, object]:
    t = unit_times(vm, BOOT_UNIT)
    analyze = guest(vm, "systemd-analyze 2>/dev/null | head -n 1; true").strip()
    return {"ready_after_kernel_start_s": round(t["ActiveEnterTimestampMonotonic"], 3),
            "unit_own_s": round(t["ActiveEnterTimestampMonotonic"]
                                - t["InactiveExitTimestampMonotonic"], 3),
            "systemd_analyze": analyze}


def timer_figures(vm: LabVM, runs: int) -> dict[str, object]:
    walls = []
    for _ in range(runs):
        guest(vm, f"systemctl start {VERIFY_SERVICE}")
        t = unit_times(vm, VERIFY_SERVICE)
        walls.append(t["ExecMainExitTimestampMonotonic"] - t["ExecMainStartTimestampMonotonic"])
    return {"systemd_run_wall_s": round(statistics.median(walls), 3),
            "script": median_of(vm, VERIFY_SCRIPT, runs)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=("trixie", "bookworm"), default="trixie")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    vm, _ = own_lab_vm(args.suite, "boot-bench")
    started = time.monotonic()
    try:
        vm.start()
        vm.wait_ssh(timeout=BOOT_TIMEOUT_S)
        run = run_pyinfra("deploy/site.py", "-y", env={"GPUNODE_LAB_VERIFY_TIMER": "1"})
        if run.returncode != 0:
            raise RuntimeError(f"converge failed:\n{run.log[-2000:]}")
        reboot_s = vm.reboot(timeout=BOOT_TIMEOUT_S)
        result = {
            "suite": args.suite, "date": date.today().isoformat(), "runs": args.runs,
            "reboot_to_ssh_s": round(reboot_s, 1),
            "boot": boot_figures(vm),
            "boot_script_again": median_of(vm, BOOT_SCRIPT, args.runs),
            "boot_floor": median_of(vm, BOOT_FLOOR, args.runs),
            "verify_timer": timer_figures(vm, args.runs),
            "verify_floor": median_of(vm, VERIFY_FLOOR, args.runs),
        }
    finally:
        vm.stop()
    result["wall_s"] = round(time.monotonic() - started)
    out = args.out or REPO / "bench" / "results" / f"boot-timer-{args.suite}-{date.today()}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

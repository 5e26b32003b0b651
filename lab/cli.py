"""`python -m lab build|up|down|power-cut|boot|status|ssh|demo|demo-args`: drive the lab VM from a
shell."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path

from lab.image import LabImageError, ensure_host_tools, ensure_image
from lab.vm import LabNotRunning, LabVM, LabVMError, default_run_dir, qemu_args, read_state


def _cmd_build(args: argparse.Namespace) -> int:
    ensure_host_tools()
    image = ensure_image(rebuild=args.rebuild)
    print(json.dumps({"image": str(image.path), **image.info()}, indent=2))
    return 0


def _cmd_up(args: argparse.Namespace) -> int:
    ensure_host_tools()
    started = time.monotonic()
    vm = LabVM(args.run_dir, ensure_image())
    state = vm.start(accel=args.accel, port=args.port)
    print(f"QEMU pid {state.pid} ({state.accel}), ssh on 127.0.0.1:{state.port}; waiting...",
          file=sys.stderr)  # fmt: skip
    waited = vm.wait_ssh(timeout=args.timeout)
    total = time.monotonic() - started
    print(json.dumps({**asdict(state), "boot_to_ssh_s": round(waited, 1),
                      "up_total_s": round(total, 1)}, indent=2))  # fmt: skip
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    vm = LabVM(args.run_dir)
    was_running = vm.is_running()
    vm.stop()
    print("stopped" if was_running else "not running")
    return 0


def _cmd_power_cut(args: argparse.Namespace) -> int:
    vm = LabVM.attach(args.run_dir)
    vm.power_cut()
    print(f"power cut: QEMU pid {vm.state.pid if vm.state else '?'} killed; the disk is kept "
          "(`python -m lab boot` starts it again)")
    return 0


def _cmd_boot(args: argparse.Namespace) -> int:
    ensure_host_tools()
    started = time.monotonic()
    vm = LabVM(args.run_dir)
    state = vm.boot(accel=args.accel)
    waited = vm.wait_ssh(timeout=args.timeout)
    print(json.dumps({**asdict(state), "boot_to_ssh_s": round(waited, 1),
                      "up_total_s": round(time.monotonic() - started, 1)}, indent=2))  # fmt: skip
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    try:
        state = read_state(args.run_dir)
    except LabNotRunning as exc:
        print(str(exc), file=sys.stderr)
        return 1
    print(json.dumps({**asdict(state), "running": True}, indent=2))
    return 0


def _cmd_ssh(args: argparse.Namespace) -> int:
    vm = LabVM.attach(args.run_dir)
    if not args.command:
        argv = vm.ssh_argv()
        os.execvp(argv[0], argv)
    rc, out, err = vm.ssh(shlex.join(args.command) if len(args.command) > 1 else args.command[0])
    sys.stdout.write(out)
    sys.stderr.write(err)
    return rc


def _cmd_demo_args(args: argparse.Namespace) -> int:
    run_dir = (args.run_dir or default_run_dir()).resolve()
    argv = qemu_args(accel=args.accel or "tcg", disk=run_dir / "disk.qcow2",
                     port=args.port or 2222, run_dir=run_dir)  # fmt: skip
    print(shlex.join(argv))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from lab.demo import run_demo

    return run_demo(args.run_dir)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab", description=__doc__)
    parser.add_argument("--run-dir", type=Path, default=None,
                        help="run dir (default $GPUNODE_LAB_RUN_DIR or <cache>/run)")  # fmt: skip
    sub = parser.add_subparsers(dest="cmd", required=True)
    build = sub.add_parser("build", help="build the base image (cached on the script's hash)")
    build.add_argument("--rebuild", action="store_true", help="build even if cached")
    build.set_defaults(func=_cmd_build)
    up = sub.add_parser("up", help="boot the VM and wait for SSH")
    up.add_argument("--accel", choices=("auto", "tcg", "kvm"), default=None)
    up.add_argument("--port", type=int, default=None, help="host port for SSH (default: free)")
    up.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for SSH")
    up.set_defaults(func=_cmd_up)
    sub.add_parser("down", help="stop the VM").set_defaults(func=_cmd_down)
    sub.add_parser("power-cut", help="kill QEMU at once, as a power loss (the disk is kept)"
                   ).set_defaults(func=_cmd_power_cut)
    boot = sub.add_parser("boot", help="boot the same disk again (after power-cut) and wait")
    boot.add_argument("--accel", choices=("tcg", "kvm"), default=None)
    boot.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for SSH")
    boot.set_defaults(func=_cmd_boot)
    sub.add_parser("status", help="print lab.json; exit 1 if down").set_defaults(func=_cmd_status)
    ssh = sub.add_parser("ssh", help="run a command in the guest (no command: a shell)")
    ssh.add_argument("command", nargs=argparse.REMAINDER)
    ssh.set_defaults(func=_cmd_ssh)
    sub.add_parser("demo", help="boot, --dry, apply + reboot, re-run, audit (make lab)"
                   ).set_defaults(func=_cmd_demo)
    demo = sub.add_parser("demo-args", help="print the QEMU command line")
    demo.add_argument("--accel", choices=("tcg", "kvm"), default=None)
    demo.add_argument("--port", type=int, default=None)
    demo.set_defaults(func=_cmd_demo_args)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m lab`."""
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except LabNotRunning as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except (LabVMError, LabImageError) as exc:  # an error a person reads, not a traceback
        print(f"lab: {exc}\n{error_hint(exc)}", file=sys.stderr)
        return 1


def error_hint(exc: Exception) -> str:
    """What to do about a lab error."""
    if isinstance(exc, LabImageError):
        return ("Fix: read the log named above; as root, with apt reachable, "
                "`python -m lab build --rebuild` starts the build again.")
    load = os.getloadavg()[0]
    return (f"Fix: the guest boots slowly when the machine is busy (load now {load:.1f} on "
            f"{os.cpu_count()} CPUs): `python -m lab down`, then `python -m lab up --timeout 900`; "
            "the guest's console is console.log in the run dir.")

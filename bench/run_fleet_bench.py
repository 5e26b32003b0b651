"""Fleet bench: gpunode dry-run and audit across N SSH hosts, wall time and peak memory per N.

    python bench/run_fleet_bench.py                   # N = 1 8 32 64, ~5 min on 2 cores
    python bench/run_fleet_bench.py --sizes 1 8 --deadline-s 300

Starts max(N) sshd instances on this machine, each on its own 127.0.0.1 port (loopback only),
with a generated host key, client key, authorized_keys and known_hosts (host keys pinned), and
for each N writes a pyinfra inventory of N hosts (fleet-001 ...), all this machine, each with
the default gpunode profile. Then, per N, under /usr/bin/time -v:

    pyinfra INV deploy/site.py --dry        (change detection: every fact of every role)
    pyinfra -y INV deploy/audit.py          (read-only report; exits 1 while P0/P1 are open,
                                             which is expected on this machine: timed anyway)

both through bench/pyinfra_counted.py (the pyinfra CLI in-process, plus a count of remote
commands). pyinfra's own parallelism (gevent, every host at once) does the fan-out. The hosts
share this machine's kernel and 2 cores: the remote side of every command runs here too, so
the figures are an upper bound for N real hosts. Everything is bounded by --deadline-s and the
sshds are stopped at the end, whatever happens. Writes its JSON to --out
(default: a new file in the temp dir).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from benchlib import (  # noqa: E402
    REPO,
    ContentionMeter,
    default_out,
    git_revision,
    machine_info,
    parse_pyinfra,
    pyinfra_version,
    stop_on_sigterm,
    timed,
    write_json,
)

SSHD = "/usr/sbin/sshd"
TIME = "/usr/bin/time"
COUNTED = BENCH_DIR / "pyinfra_counted.py"
MAX_RSS = re.compile(r"Maximum resident set size \(kbytes\):\s*(\d+)")
CPU_TIME = re.compile(r"(User|System) time \(seconds\):\s*([\d.]+)")
VERDICT = re.compile(r"^(fleet-\d+): (?:NOT )?READY", re.MULTILINE)
SSHD_CONFIG = """\
# bench/run_fleet_bench.py: one loopback-only sshd per fake host.
ListenAddress 127.0.0.1:{port}
HostKey {dir}/ssh_host_ed25519_key
PidFile {dir}/sshd-{port}.pid
AuthorizedKeysFile {dir}/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxStartups 200:30:400
MaxSessions 64
LogLevel ERROR
Subsystem sftp internal-sftp
"""


def ensure_tools() -> None:
    """openssh-server (sshd) and GNU time, from apt when missing."""
    missing = [pkg for path, pkg in ((SSHD, "openssh-server"), (TIME, "time"))
               if not Path(path).exists()]
    if missing:
        print(f"installing {' '.join(missing)} (apt) ...", flush=True)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        install = ["apt-get", "install", "-y", "-q", *missing]
        if subprocess.run(install, env=env, stdout=subprocess.DEVNULL).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], check=True, env=env,
                           stdout=subprocess.DEVNULL)
            subprocess.run(install, check=True, env=env, stdout=subprocess.DEVNULL)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir


def free_ports(count: int) -> list[int]:
    """count distinct TCP ports free on 127.0.0.1 right now."""
    socks, ports = [], []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
            ports.append(sock.getsockname()[1])
    finally:
        for sock in socks:
            sock.close()
    return ports


class SshFleet:
    """max(N) sshd processes on loopback ports; stopped by stop() (by pid, ours only)."""

    def __init__(self, workdir: Path, count: int) -> None:
        self.dir = workdir
        self.count = count
        self.ports: list[int] = []
        self.procs: list[subprocess.Popen] = []

    def keys(self) -> None:
        for name in ("ssh_host_ed25519_key", "id_ed25519"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpunode-bench",
                            "-f", str(self.dir / name)], check=True)
        shutil.copy(self.dir / "id_ed25519.pub", self.dir / "authorized_keys")

    def start(self, timeout: float = 60.0) -> float:
        started = time.monotonic()
        self.keys()
        self.ports = free_ports(self.count)
        host_key = (self.dir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        (self.dir / "known_hosts").write_text(
            "".join(f"[127.0.0.1]:{p} {host_key[0]} {host_key[1]}\n" for p in self.ports))
        log = (self.dir / "sshd.log").open("ab")
        for port in self.ports:
            conf = self.dir / f"sshd-{port}.conf"
            conf.write_text(SSHD_CONFIG.format(port=port, dir=self.dir))
            self.procs.append(subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(conf)], stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT))  # fmt: skip
        pending = set(self.ports)
        while pending and time.monotonic() - started < timeout:
            for port in list(pending):
                with socket.socket() as sock:
                    sock.settimeout(0.5)
                    if sock.connect_ex(("127.0.0.1", port)) == 0:
                        pending.discard(port)
            dead = [p.args for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"sshd exited: {dead[0]}; see {self.dir / 'sshd.log'}")
            time.sleep(0.2)
        if pending:
            raise RuntimeError(f"{len(pending)} sshd(s) not listening after {timeout:.0f} s")
        return time.monotonic() - started

    def inventory(self, n: int) -> Path:
        """A pyinfra inventory of the first n hosts (default gpunode profile)."""
        path = self.dir / f"fleet_{n}.py"
        key, known = self.dir / "id_ed25519", self.dir / "known_hosts"
        lines = [
            f'"""bench fleet: {n} hosts, all sshds on this machine (loopback)."""',
            "fleet = [",
        ]
        for i, port in enumerate(self.ports[:n], 1):
            lines.append(
                f'    ("fleet-{i:03d}", {{"ssh_hostname": "127.0.0.1", "ssh_port": {port}, '
                f'"ssh_user": "root", "ssh_key": "{key}", "ssh_known_hosts_file": "{known}", '
                f'"ssh_strict_host_key_checking": "yes", "gpunode": {{}}}}),'
            )
        lines.append("]")
        path.write_text("\n".join(lines) + "\n")
        return path

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()


def measure(label: str, inventory: Path, deploy: str, extra: list[str], log: Path,
            timeout: float) -> dict:
    argv = [TIME, "-v", sys.executable, str(COUNTED), str(inventory), deploy, *extra]
    run = parse_pyinfra(timed(label, argv, log, timeout=timeout, meter=ContentionMeter()))
    text = log.read_text(errors="replace")
    rss = MAX_RSS.search(text)
    connected = text.count("] Connected")
    verdicts = len(set(VERDICT.findall(text)))
    cpu = {kind.lower(): float(value) for kind, value in CPU_TIME.findall(text)}
    out = {
        "wall_s": run.wall_s,
        "peak_rss_mib": round(int(rss.group(1)) / 1024, 1) if rss else None,
        "pyinfra_cpu_s": round(cpu.get("user", 0.0) + cpu.get("system", 0.0), 2) if cpu else None,
        "rc": run.rc,
        "hosts_connected": connected,
        "hosts_reported": verdicts if deploy.endswith("audit.py") else None,
        "remote_commands": run.remote_commands,
        "remote_commands_per_host": None,
        "other_vm_cpu_s": run.contention.other_vm_cpu_s if run.contention else None,
        "load_avg_1m": ([run.contention.load_avg_1m_start, run.contention.load_avg_1m_end]
                        if run.contention else None),
        "log": str(log),
    }
    if run.remote_commands is not None and connected:
        out["remote_commands_per_host"] = round(run.remote_commands / connected, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--deadline-s", type=float, default=570.0,
                        help="stop starting new runs past this (whole bench)")
    parser.add_argument("--timeout-s", type=float, default=240.0, help="per pyinfra run")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON to write (default: a new file in the temp dir; "
                             "bench/results/fleet.json to record a figure)")
    args = parser.parse_args(argv)
    args.out = args.out or default_out("fleet")
    stop_on_sigterm()

    ensure_tools()
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="gpunode-fleet-"))
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    logs = Path.home() / ".cache" / "gpunode" / "bench-logs" / f"fleet-{stamp}"
    fleet = SshFleet(workdir, max(args.sizes))
    result: dict = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "gpunode_revision": git_revision(),
        "pyinfra": pyinfra_version(),
        "runs": [],
        "notes": [],
    }
    try:
        up = fleet.start()
        print(f"{fleet.count} sshd(s) on 127.0.0.1 ports {fleet.ports[0]}..., up in {up:.1f} s; "
              f"work dir {workdir}", flush=True)
        for n in sorted(args.sizes):
            inventory = fleet.inventory(n)
            row: dict = {"hosts": n}
            for kind, deploy, extra in (("dry", "deploy/site.py", ["--dry"]),
                                        ("audit", "deploy/audit.py", ["-y"])):
                left = args.deadline_s - (time.monotonic() - started)
                if left < 20:
                    result["notes"].append(f"N={n} {kind}: skipped (deadline)")
                    continue
                row[kind] = measure(f"N={n} {kind}", inventory, deploy, extra,
                                    logs / f"{kind}-{n}.log", min(args.timeout_s, left))
                r = row[kind]
                if r["hosts_reported"] is not None and r["hosts_reported"] < n:
                    result["notes"].append(
                        f"N={n} audit: only {r['hosts_reported']} of {n} hosts reported before "
                        "the run stopped at the first failing host (see bench/README.md)")
                reported = (f", audited {r['hosts_reported']}/{n}"
                            if r["hosts_reported"] is not None else "")
                print(f"N={n:3d} {kind:5}: {r['wall_s']:6.1f} s, peak RSS {r['peak_rss_mib']} MiB,"
                      f" rc={r['rc']}, connected {r['hosts_connected']}/{n}{reported}, remote "
                      f"cmds {r['remote_commands']} ({r['remote_commands_per_host']}/host)",
                      flush=True)
            result["runs"].append(row)
    finally:
        fleet.stop()
        result["total_s"] = round(time.monotonic() - started, 1)
        result["logs"] = str(logs)
        write_json(args.out, result)
        if os.environ.get("GPUNODE_BENCH_KEEP") != "1":
            shutil.copy(workdir / "sshd.log", logs / "sshd.log") if logs.is_dir() else None
            shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(f"{'N':>3}  {'dry-run s':>9} {'CPU s':>6} {'peak MiB':>8} {'cmds/host':>9}   "
          f"{'audit s':>7} {'CPU s':>6} {'peak MiB':>8} {'audited':>7} {'rc':>3}")
    for row in result["runs"]:
        d, a = row.get("dry") or {}, row.get("audit") or {}
        print(f"{row['hosts']:>3}  {d.get('wall_s', '-'):>9} {d.get('pyinfra_cpu_s', '-'):>6} "
              f"{d.get('peak_rss_mib', '-'):>8} "
              f"{d.get('remote_commands_per_host', '-'):>9}   {a.get('wall_s', '-'):>7} "
              f"{a.get('pyinfra_cpu_s', '-'):>6} "
              f"{a.get('peak_rss_mib', '-'):>8} {a.get('hosts_reported', '-'):>7} "
              f"{a.get('rc', '-'):>3}")
    for note in result["notes"]:
        print(f"note: {note}")
    out = args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out
    print(f"\nwrote {out} ({result['total_s']:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

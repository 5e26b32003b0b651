"""The lab VM: a Debian 13 (or 12) guest under QEMU with 2 NUMA nodes and PCIe stand-ins for GPUs.

Topology (q35): two e1000e endpoints (8086:10d3, class 0200, no netdev) stand in for GPUs, each
behind its own pcie-root-port, the second one on a pxb-pcie expander bound to NUMA node 1
(0000:21:00.0, numa_node 1: a GPU on the second socket), and a virtio-net NIC (1af4:1041)
behind a third root port, on user-mode networking with only 127.0.0.1:PORT forwarded to the
guest's sshd. The disk is a throwaway qcow2
overlay on the cached base image. A run dir holds the overlay, the pid, the serial console log and
lab.json (address, key and known_hosts paths), which inventories/lab.py reads, so `down`,
`status` and pyinfra work from other processes. The guest may reboot (QEMU keeps running).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path

import paramiko

from lab.accel import choose_accel
from lab.image import LabImage, cache_dir, ensure_image

RUN_DIR_ENV = "GPUNODE_LAB_RUN_DIR"
STATE_FILE = "lab.json"
HOST_NAME = "gpunode-lab"
NOT_RUNNING = "lab VM is not running: run `python -m lab up`"
MEMORY_MB = 2048
GPU_STANDINS = 2
#: First bus number of the pxb-pcie expander on NUMA node 1 (its stand-in is on bus PXB_BUS_NR+1).
PXB_BUS_NR = 32
# While the guest is down, slirp accepts the TCP connection and then says nothing: keep each
# probe short so that SSH is noticed within seconds of sshd starting.
PROBE_CONNECT_S = 4.0


class LabVMError(RuntimeError):
    """The lab VM failed to start, died, or did not answer in time."""


class LabNotRunning(LabVMError):
    """No live lab VM in the run dir."""


def default_run_dir() -> Path:
    """$GPUNODE_LAB_RUN_DIR or <cache>/run."""
    env = os.environ.get(RUN_DIR_ENV)
    return Path(env) if env else cache_dir() / "run"


@dataclass
class LabState:
    """What lab.json records about a running lab VM."""

    name: str
    host: str
    port: int
    user: str
    ssh_key: str
    known_hosts: str
    pid: int
    accel: str
    run_dir: str
    image: str
    console_log: str
    started_at: float

    def pyinfra_host_data(self) -> dict:
        """pyinfra SSH host data for this VM: key login, host key pinned and checked."""
        return {
            "ssh_hostname": self.host,
            "ssh_port": self.port,
            "ssh_user": self.user,
            "ssh_key": self.ssh_key,
            "ssh_known_hosts_file": self.known_hosts,
            "ssh_strict_host_key_checking": "yes",
        }

    def write(self) -> None:
        path = Path(self.run_dir) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(path)


def read_state(run_dir: Path | None = None, alive: bool = True) -> LabState:
    """The state of the live lab VM in run_dir (alive=False: of the last one, even if its
    QEMU is gone, as after a power cut); LabNotRunning if there is none."""
    run_dir = run_dir or default_run_dir()
    try:
        state = LabState(**json.loads((run_dir / STATE_FILE).read_text()))
    except (OSError, ValueError, TypeError) as exc:
        raise LabNotRunning(NOT_RUNNING) from exc
    if alive and not _qemu_alive(state.pid, Path(state.run_dir)):
        raise LabNotRunning(NOT_RUNNING)
    return state


def qemu_args(*, accel: str, disk: Path, port: int, run_dir: Path) -> list[str]:
    """The QEMU command line of the lab VM."""
    accel_opt = "tcg,thread=multi" if accel == "tcg" else accel
    half = MEMORY_MB // 2
    args = [
        "qemu-system-x86_64", "-name", HOST_NAME,
        "-accel", accel_opt, "-machine", "q35", "-cpu", "max",
        "-m", str(MEMORY_MB), "-smp", "2,sockets=2",
        "-object", f"memory-backend-ram,id=mem0,size={half}M",
        "-object", f"memory-backend-ram,id=mem1,size={half}M",
        "-numa", "node,nodeid=0,cpus=0,memdev=mem0",
        "-numa", "node,nodeid=1,cpus=1,memdev=mem1",
        "-nodefaults", "-display", "none",
        "-serial", f"file:{run_dir / 'console.log'}",
        "-monitor", f"unix:{run_dir / 'monitor.sock'},server=on,wait=off",
        "-drive", f"file={disk},format=qcow2,if=none,id=disk0,cache=unsafe,discard=unmap",
        "-device", "virtio-blk-pci,drive=disk0,bootindex=0",
        "-device", "virtio-rng-pci",
    ]  # fmt: skip
    # The last stand-in sits behind a pxb-pcie expander (an extra PCIe root bus, as a second
    # socket's root complex) bound to NUMA node 1, so its sysfs numa_node is 1; the others
    # are on pcie.0, which the firmware gives no node (numa_node -1).
    args += ["-device", f"pxb-pcie,id=pxb1,bus_nr={PXB_BUS_NR},numa_node=1,bus=pcie.0"]
    for i in range(GPU_STANDINS):
        bus = "pxb1" if i == GPU_STANDINS - 1 else "pcie.0"
        args += ["-device", f"pcie-root-port,id=rp{i},chassis={i + 1},bus={bus}"]
        args += ["-device", f"e1000e,id=gpu{i},bus=rp{i},romfile="]
    nic = GPU_STANDINS
    args += [
        "-device", f"pcie-root-port,id=rp{nic},chassis={nic + 1},bus=pcie.0",
        "-netdev", f"user,id=net0,hostfwd=tcp:127.0.0.1:{port}-:22",
        "-device", f"virtio-net-pci,netdev=net0,bus=rp{nic},disable-legacy=on,romfile=",
    ]  # fmt: skip
    return args


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def known_hosts_line(port: int, host_key_pub: Path) -> str:
    """known_hosts entry pinning the guest's host key for [127.0.0.1]:port."""
    key_type, key_b64 = host_key_pub.read_text().split()[:2]
    return f"[127.0.0.1]:{port} {key_type} {key_b64}\n"


class LabVM:
    """Start, reach, reboot and stop the lab VM."""

    def __init__(self, run_dir: Path | None = None, image: LabImage | None = None) -> None:
        self.run_dir = (run_dir or default_run_dir()).resolve()
        self.image = image
        self.state: LabState | None = None
        self._proc: subprocess.Popen | None = None

    @classmethod
    def attach(cls, run_dir: Path | None = None) -> LabVM:
        """A LabVM for the VM already running in run_dir (LabNotRunning if none)."""
        vm = cls(run_dir)
        vm.state = read_state(vm.run_dir)
        return vm

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self, accel: str | None = None, port: int | None = None,
              base: Path | None = None) -> LabState:
        """Boot the VM on a fresh overlay of base (default: the image's; the crash sweep gives
        a converged node's disk), stopping a stale one in run_dir; does not wait."""
        self.image = self.image or ensure_image()
        self._stop_stale()
        self._reset_run_dir()
        disk = self.run_dir / "disk.qcow2"
        _create_overlay(base or self.image.base, disk)
        accel = choose_accel(self.image, accel)
        for attempt in range(3):
            chosen = port or free_port()
            if self._launch(accel, disk, chosen):
                return self._record(accel, chosen)
            if port or attempt == 2:
                break
        raise LabVMError(f"QEMU did not start:\n{self._tail('qemu.log')}")

    def wait_ssh(self, timeout: float = 300.0) -> float:
        """Wait until root can log in over SSH (host key checked); return the seconds waited."""
        started = time.monotonic()
        with _quiet_paramiko():
            while True:
                self._check_alive()
                try:
                    self.ssh("true", timeout=15, connect_timeout=PROBE_CONNECT_S)
                    return time.monotonic() - started
                except paramiko.BadHostKeyException:
                    raise  # the pinned key did not match: never retry past that
                except (OSError, EOFError, paramiko.SSHException) as exc:
                    error = exc
                if time.monotonic() - started > timeout:
                    raise LabVMError(
                        f"no SSH after {timeout:.0f} s ({error!r}); console:\n{self.console_tail()}"
                    )
                time.sleep(1.0)

    def reboot(self, timeout: float = 300.0) -> float:
        """Reboot the guest and wait for SSH on the new boot; return the seconds it took."""
        old = self.boot_id()
        started = time.monotonic()
        # The connection may drop as the guest goes down.
        with _quiet_paramiko(), suppress(OSError, EOFError, paramiko.SSHException):
            self.ssh("systemctl reboot", timeout=10)
        while time.monotonic() - started < timeout:
            time.sleep(2.0)
            self.wait_ssh(timeout=max(1.0, timeout - (time.monotonic() - started)))
            with _quiet_paramiko(), suppress(OSError, EOFError, paramiko.SSHException):
                if self.boot_id() != old:
                    return time.monotonic() - started
        raise LabVMError(f"guest did not come back within {timeout:.0f} s")

    def power_cut(self) -> None:
        """Kill QEMU at once (SIGKILL), as a power loss would: what the guest had not written
        to its disk (its page cache) is gone. The disk stays in the run dir for `boot`."""
        state = self.state or read_state(self.run_dir)
        if _qemu_alive(state.pid, self.run_dir):
            os.kill(state.pid, signal.SIGKILL)
        deadline = time.monotonic() + 15.0
        while _pid_exists(state.pid) and time.monotonic() < deadline:
            if self._proc is not None:
                self._proc.poll()
            time.sleep(0.05)
        self._proc = None
        self.state = state

    def boot(self, accel: str | None = None) -> LabState:
        """Boot the disk already in the run dir again (after `power_cut`; no new overlay), on
        the same SSH port when it is free; does not wait for SSH."""
        disk = self.run_dir / "disk.qcow2"
        if not disk.exists():
            raise LabVMError(f"no disk in {self.run_dir}: `python -m lab up` makes one")
        last = self.state or read_state(self.run_dir, alive=False)
        if _qemu_alive(last.pid, self.run_dir):
            raise LabVMError(f"the lab VM in {self.run_dir} is running (pid {last.pid})")
        self.image = self.image or ensure_image()
        accel = accel or last.accel
        for port in (last.port, free_port(), free_port()):
            if self._launch(accel, disk, port):
                return self._record(accel, port)
        raise LabVMError(f"QEMU did not start:\n{self._tail('qemu.log')}")

    def stop(self, timeout: float = 15.0) -> None:
        """Stop QEMU (SIGTERM, then SIGKILL) and drop the overlay; keeps the logs."""
        pid = self.state.pid if self.state else _read_pid(self.run_dir)
        if pid and _qemu_alive(pid, self.run_dir):
            _terminate(pid, timeout, self._proc)
        elif self._proc:
            self._proc.wait()
        self._proc = None
        self.state = None
        for name in (STATE_FILE, "disk.qcow2", "qemu.pid", "known_hosts", "id_ed25519"):
            (self.run_dir / name).unlink(missing_ok=True)

    def is_running(self) -> bool:
        pid = self.state.pid if self.state else _read_pid(self.run_dir)
        return _qemu_alive(pid, self.run_dir)

    # -- SSH -----------------------------------------------------------------------------------

    def ssh(
        self, command: str, timeout: float = 120.0, connect_timeout: float = 30.0
    ) -> tuple[int, str, str]:
        """Run command as root in the guest: (exit status, stdout, stderr)."""
        client = self._connect(connect_timeout)
        try:
            _, stdout, stderr = client.exec_command(command, timeout=timeout)
            out = stdout.read().decode(errors="replace")
            err = stderr.read().decode(errors="replace")
            return stdout.channel.recv_exit_status(), out, err
        finally:
            client.close()

    def boot_id(self) -> str:
        """The guest kernel's boot id: changes at every boot."""
        rc, out, err = self.ssh("cat /proc/sys/kernel/random/boot_id", timeout=30)
        if rc != 0:
            raise LabVMError(f"boot_id: {err}")
        return out.strip()

    def ssh_argv(self, *command: str) -> list[str]:
        """An OpenSSH client command line to the guest, with the pinned known_hosts."""
        state = self._require_state()
        return [
            "ssh", "-p", str(state.port), "-i", state.ssh_key,
            "-o", "IdentitiesOnly=yes", "-o", f"UserKnownHostsFile={state.known_hosts}",
            "-o", "StrictHostKeyChecking=yes", "-o", "GlobalKnownHostsFile=/dev/null",
            f"{state.user}@{state.host}", *command,
        ]  # fmt: skip

    def console_tail(self, lines: int = 40) -> str:
        """The last lines of the guest's serial console."""
        return self._tail("console.log", lines)

    # -- internals -----------------------------------------------------------------------------

    def _require_state(self) -> LabState:
        if self.state is None:
            self.state = read_state(self.run_dir)
        return self.state

    def _connect(self, timeout: float) -> paramiko.SSHClient:
        state = self._require_state()
        client = paramiko.SSHClient()
        client.load_host_keys(state.known_hosts)
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(
                state.host, port=state.port, username=state.user, key_filename=state.ssh_key,
                look_for_keys=False, allow_agent=False, timeout=timeout,
                banner_timeout=timeout, auth_timeout=max(timeout, 30.0),
            )  # fmt: skip
        except BaseException:
            client.close()
            raise
        return client

    def _check_alive(self) -> None:
        if not self.is_running():
            raise LabVMError(
                f"QEMU exited:\n{self._tail('qemu.log')}\nconsole:\n{self.console_tail()}"
            )

    def _stop_stale(self) -> None:
        pid = _read_pid(self.run_dir)
        if pid and _qemu_alive(pid, self.run_dir):
            _terminate(pid, 15.0, None)

    def _reset_run_dir(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for name in (STATE_FILE, "disk.qcow2", "qemu.pid", "known_hosts", "id_ed25519",
                     "console.log", "qemu.log", "monitor.sock"):  # fmt: skip
            (self.run_dir / name).unlink(missing_ok=True)

    def _launch(self, accel: str, disk: Path, port: int) -> bool:
        """Start QEMU detached; False if it exited at once (e.g. the port was taken)."""
        args = qemu_args(accel=accel, disk=disk, port=port, run_dir=self.run_dir)
        with (self.run_dir / "qemu.log").open("ab") as log:
            self._proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        (self.run_dir / "qemu.pid").write_text(f"{self._proc.pid}\n")
        try:
            self._proc.wait(timeout=1.5)
        except subprocess.TimeoutExpired:
            return True
        return False

    def _record(self, accel: str, port: int) -> LabState:
        assert self.image is not None and self._proc is not None
        known_hosts = self.run_dir / "known_hosts"
        known_hosts.write_text(known_hosts_line(port, self.image.host_key_pub))
        # A copy, so that rebuilding the image (new keys) leaves a running VM reachable.
        client_key = self.run_dir / "id_ed25519"
        shutil.copyfile(self.image.client_key, client_key)
        client_key.chmod(0o600)
        self.state = LabState(
            name=HOST_NAME, host="127.0.0.1", port=port, user="root",
            ssh_key=str(client_key), known_hosts=str(known_hosts),
            pid=self._proc.pid, accel=accel, run_dir=str(self.run_dir),
            image=str(self.image.base), console_log=str(self.run_dir / "console.log"),
            started_at=time.time(),
        )  # fmt: skip
        self.state.write()
        return self.state

    def _tail(self, name: str, lines: int = 40) -> str:
        try:
            text = (self.run_dir / name).read_text(errors="replace")
        except OSError:
            return f"({name} missing)"
        return "\n".join(text.splitlines()[-lines:])


@contextmanager
def _quiet_paramiko() -> Iterator[None]:
    """Silence paramiko's transport errors while the guest is still booting."""
    logger = logging.getLogger("paramiko")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _create_overlay(base: Path, disk: Path) -> None:
    subprocess.run(
        ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(base), str(disk)],
        check=True,
    )


def _read_pid(run_dir: Path) -> int | None:
    try:
        return int((run_dir / "qemu.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def _qemu_alive(pid: int | None, run_dir: Path) -> bool:
    """True if pid is a live (not zombie) QEMU whose disk is in run_dir (None: no pid known)."""
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    zombie = stat.rsplit(")", 1)[-1].split()[0] == "Z"
    return not zombie and str(run_dir / "disk.qcow2") in cmdline


def _terminate(pid: int, timeout: float, proc: subprocess.Popen | None) -> None:
    """SIGTERM pid, wait, then SIGKILL; reap it when it is our child."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return
        if proc is None and not _pid_exists(pid):
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    if proc is not None:
        proc.wait()


def _pid_exists(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"

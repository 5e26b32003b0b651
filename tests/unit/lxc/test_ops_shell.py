"""The shell the Proxmox operations send, run for real on a copy of the paths (sh, flock,
sha1sum): the guarded config write and the append after pct create."""

import shutil
import subprocess

import pytest
from pyinfra.api import FileUploadCommand

import gpunode.roles.lxc_gpu.ops as lxc

pytestmark = pytest.mark.skipif(shutil.which("flock") is None, reason="needs util-linux flock")


@pytest.fixture
def paths(tmp_path, monkeypatch):
    conf_dir = tmp_path / "etc-pve-lxc"
    conf_dir.mkdir()
    monkeypatch.setattr(lxc, "PVE_LXC_DIR", str(conf_dir))
    monkeypatch.setattr(lxc, "BACKUP_DIR", str(tmp_path / "backups"))
    monkeypatch.setattr(lxc, "LOCK_DIR", str(tmp_path / "lock"))
    return tmp_path, conf_dir / "110.conf"


def run(commands) -> subprocess.CompletedProcess:
    for command in commands:
        if isinstance(command, FileUploadCommand):
            command.src.seek(0)
            with open(command.dest, "w", newline="") as handle:
                handle.write(command.src.read())
            continue
        proc = subprocess.run(
            ["sh", "-c", command.get_raw_value()], capture_output=True, text=True
        )
        if proc.returncode:
            return proc
    return proc


def test_guarded_write_replaces_and_keeps_a_backup(paths):
    tmp_path, conf = paths
    conf.write_text("hostname: llm-a\n")
    proc = run(lxc.guarded_write_commands(110, "hostname: llm-a\n", "hostname: llm-a\nlxc.x: 1"))
    assert proc.returncode == 0, proc.stderr
    assert conf.read_text() == "hostname: llm-a\nlxc.x: 1"
    (backup,) = (tmp_path / "backups").iterdir()
    assert backup.name.startswith("110.conf.") and backup.read_text() == "hostname: llm-a\n"
    assert sorted(p.name for p in conf.parent.iterdir()) == ["110.conf"]


def test_guarded_write_refuses_when_the_file_changed_since_it_was_read(paths):
    tmp_path, conf = paths
    conf.write_text("hostname: llm-a\ncores: 4\n")  # someone ran pct set meanwhile
    proc = run(lxc.guarded_write_commands(110, "hostname: llm-a\n", "hostname: llm-a\nlxc.x: 1\n"))
    assert proc.returncode == 1
    assert "changed while gpunode edited it: nothing written, run again" in proc.stderr
    assert conf.read_text() == "hostname: llm-a\ncores: 4\n"
    assert sorted(p.name for p in conf.parent.iterdir()) == ["110.conf"]


def test_append_after_create_quotes_each_line_and_needs_the_file(paths):
    _, conf = paths
    lines = ["lxc.cgroup2.devices.allow: c 195:* rwm", "lxc.mount.entry: /dev/nvidia0 dev/x"]
    assert run([lxc.append_lines_command(110, lines)]).returncode == 1  # no config: no file
    assert not conf.exists()
    conf.write_text("arch: amd64\n")
    assert run([lxc.append_lines_command(110, lines)]).returncode == 0
    assert conf.read_text() == "arch: amd64\n" + "".join(f"{line}\n" for line in lines)

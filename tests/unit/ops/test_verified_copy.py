"""Originals are never a partial copy (issue 28, item 3): keep_original_command and
backup_command copy to a temporary, check size and SHA-256 against the source and rename; a
cp that is cut short (full disk, SIGKILL: a `cp` on PATH that writes half the file) leaves
nothing behind and fails, so the next run tries again. Run by the real /bin/sh."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import gpunode.ops.files as files


@pytest.fixture
def node(tmp_path, monkeypatch):
    """originals/ and backups/ under tmp_path (the node's /var/lib/gpunode)."""
    monkeypatch.setattr(files, "original_path", lambda p: str(tmp_path / "originals") + p)
    monkeypatch.setattr(files, "backup_prefix", lambda p: str(tmp_path / "backups") + p)
    source = tmp_path / "etc" / "default" / "grub"
    source.parent.mkdir(parents=True)
    source.write_text("GRUB_TIMEOUT=5\n" * 1000)
    return tmp_path, source


def _run(command: str, tmp_path, short_cp: bool) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if short_cp:  # a cp cut short: half the bytes, exit 0 (what a full disk can leave)
        fake = bin_dir / "cp"
        fake.write_text('#!/bin/sh\nfor last; do :; done\nhead -c 100 "$2" > "$last"\n')
        fake.chmod(0o755)
    else:
        (bin_dir / "cp").unlink(missing_ok=True)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    return subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env=env)


def test_partial_original_is_never_kept(node):
    tmp_path, source = node
    command = files.keep_original_command(str(source)).get_raw_value()
    done = _run(command, tmp_path, short_cp=True)
    original = Path(files.original_path(str(source)))
    assert done.returncode != 0 and "does not match" in done.stderr
    assert not original.exists()
    assert list(original.parent.iterdir()) == [], "no temporary left behind"
    again = _run(command, tmp_path, short_cp=False)
    assert again.returncode == 0, again.stderr
    assert original.read_bytes() == source.read_bytes()


def test_partial_backup_is_never_kept(node):
    tmp_path, source = node
    command = files.backup_command(str(source)).get_raw_value()
    done = _run(command, tmp_path, short_cp=True)
    backups = Path(files.backup_prefix(str(source))).parent
    assert done.returncode != 0 and list(backups.iterdir()) == []
    assert _run(command, tmp_path, short_cp=False).returncode == 0
    [kept] = list(backups.iterdir())
    assert kept.read_bytes() == source.read_bytes()

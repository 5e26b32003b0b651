"""Originals kept for good, backups rotated, file states read: the real shell commands, run here
on a scratch tree (the state dir moved under tmp_path)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from gpunode.facts.owned import (
    STATE_DIR,
    FileState,
    KeptOriginals,
    OwnedFiles,
    parse_file_states,
)
from gpunode.ops.files import backup_command, keep_original_command


def sh(command: str, tmp_path: Path) -> str:
    """Run a command with the state dir and the edited file's root moved under tmp_path."""
    command = command.replace(STATE_DIR, str(tmp_path / "state"))
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    return proc.stdout


def edit(dest: Path, text: str, tmp_path: Path) -> None:
    """What atomic_write_commands does around the upload: keep, back up, replace."""
    sh(str(keep_original_command(str(dest))), tmp_path)
    sh(str(backup_command(str(dest))), tmp_path)
    dest.write_text(text)


def test_the_original_survives_many_edits_and_backups_rotate(tmp_path):
    grub = tmp_path / "etc" / "default" / "grub"
    grub.parent.mkdir(parents=True)
    grub.write_text("GRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"\n")
    os.chmod(grub, 0o600)
    for n in range(8):
        edit(grub, f"edit {n}\n", tmp_path)
    original = tmp_path / "state" / "originals" / str(grub).lstrip("/")
    assert original.read_text() == "GRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"\n"
    assert original.stat().st_mode & 0o777 == 0o600  # cp -p: the mode too
    backups = sorted((tmp_path / "state" / "backups" / str(grub.parent).lstrip("/")).iterdir())
    assert len(backups) == 5
    assert [b.read_text() for b in backups] == [f"edit {n}\n" for n in range(2, 7)]


def test_a_file_that_was_absent_is_recorded_so(tmp_path):
    conf = tmp_path / "etc" / "sysctl.d" / "90-gpunode.conf"
    conf.parent.mkdir(parents=True)
    edit(conf, "a\n", tmp_path)
    edit(conf, "b\n", tmp_path)
    kept = tmp_path / "state" / "originals" / str(conf).lstrip("/")
    assert not kept.exists()
    assert Path(f"{kept}.absent").exists()
    output = sh(KeptOriginals().command([str(conf), str(tmp_path / "other")]), tmp_path)
    assert KeptOriginals().process(output.splitlines()) == {str(conf): "absent",
                                                             str(tmp_path / "other"): None}


def test_owned_files_reads_content_mode_and_owner(tmp_path):
    conf = tmp_path / "limits.conf"
    conf.write_text("vm.swappiness = 10\n")
    os.chmod(conf, 0o666)
    output = sh(OwnedFiles().command([str(conf), str(tmp_path / "absent")]), tmp_path)
    states = parse_file_states(output)
    state = states[str(conf)]
    assert state is not None
    assert state.sha1 == "873b97994bd91fd8a0ec42b60d7ef2a6567374af"
    assert state.mode == "666"
    assert states[str(tmp_path / "absent")] is None


def test_drift_names_mode_and_owner():
    state = FileState(sha1="x", mode="666", user="nobody", group="root")
    assert state.drift("644") == ["mode 0666 -> 0644", "owner nobody:root -> root:root"]
    assert FileState(sha1="x", mode="644", user="root", group="root").drift("0644") == []


def test_owned_files_are_read_by_one_sha1sum_and_one_stat(tmp_path):
    """Any number of paths: a folder and a missing path are None, a name with spaces and a
    symlink to a file are read (the link's own mode, as stat without -L gives it)."""
    spaced = tmp_path / "a b.conf"
    spaced.write_text("x\n")
    os.chmod(spaced, 0o640)
    link = tmp_path / "link.conf"
    link.symlink_to(spaced)
    paths = [str(spaced), str(tmp_path), str(tmp_path / "gone"), str(link)]
    command = OwnedFiles().command(paths)
    assert command.count("sha1sum") == 1 and command.count("stat ") == 1
    states = parse_file_states(sh(command, tmp_path))
    assert set(states) == set(paths)
    assert states[str(tmp_path)] is None and states[str(tmp_path / "gone")] is None
    spaced_state, link_state = states[str(spaced)], states[str(link)]
    assert spaced_state is not None and link_state is not None
    assert spaced_state.sha1 == link_state.sha1 == "6fcf9dfbd479ed82697fee719b9f8c610a11ff2a"
    assert spaced_state.mode == "640" and link_state.mode == "777"
    assert OwnedFiles().command([]) == "true"

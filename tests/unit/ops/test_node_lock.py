"""One run at a time on a node (issue 28, item 5): the lock command run by the real /bin/sh
with the real flock, in a temporary folder instead of /run/gpunode. A run holds it while its
process lives; a second run is told who holds it; the lock frees itself when the run ends."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

import gpunode.facts.lock as lock


@pytest.fixture
def lock_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(lock, "LOCK_DIR", str(tmp_path / "gpunode"))
    monkeypatch.setattr(lock, "LOCK_FILE", str(tmp_path / "gpunode" / "lock"))
    monkeypatch.setattr(lock, "LOCK_WAIT_S", 1)
    return tmp_path / "gpunode"


def _take(run: str) -> str:
    command = lock.lock_command(run, lock.owner_line(run))
    return subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True,
                          timeout=30).stdout


def _run_process(run: str) -> subprocess.Popen:
    """A stand-in for a pyinfra run: a process that takes the lock, then lives on."""
    command = lock.lock_command(run, lock.owner_line(run))
    code = ("import subprocess, sys, time\n"
            f"out = subprocess.run(['/bin/sh', '-c', {command!r}], capture_output=True, "
            "text=True).stdout\nprint(out, flush=True)\ntime.sleep(60)\n")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def test_second_run_is_told_who_holds_the_lock_until_the_first_ends(lock_dir):
    first = _run_process("aaaa1111")
    try:
        assert first.stdout is not None and "gpunode-lock: taken" in first.stdout.readline()
        second = _take("bbbb2222")
        assert "gpunode-lock: held: run=aaaa1111 " in second
        refusal = lock.lock_refusal(second)
        assert refusal and "run=aaaa1111" in refusal and "wait for it" in refusal
        assert lock.lock_refusal(_take("aaaa1111")) is None, "the same run goes on"
    finally:
        first.kill()
        first.wait()
    deadline = time.monotonic() + 10
    while (lock_dir / "lock.owner").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (lock_dir / "lock.owner").exists(), "the owner line goes with the run"
    assert lock.lock_refusal(_take("bbbb2222")) is None, "a killed run frees the lock"


def _gone(path, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    return not path.exists()


def test_where_gpunode_is_not_on_the_node_the_run_leaves_no_lock_folder(lock_dir, tmp_path,
                                                                         monkeypatch):
    """No state folder (a --dry on a fresh node, or after undo): when the run ends, the lock
    folder goes, lock file and all (issue #42: undo leaves nothing behind)."""
    monkeypatch.setattr(lock, "STATE_DIR", str(tmp_path / "no-state"))
    first = _run_process("aaaa1111")
    assert first.stdout is not None and "gpunode-lock: taken" in first.stdout.readline()
    assert (lock_dir / "lock").exists()
    first.kill()
    first.wait()
    assert _gone(lock_dir), "the lock folder stays after the run"


def test_where_gpunode_is_on_the_node_the_lock_folder_stays(lock_dir, tmp_path, monkeypatch):
    (tmp_path / "state").mkdir()
    monkeypatch.setattr(lock, "STATE_DIR", str(tmp_path / "state"))
    first = _run_process("aaaa1111")
    assert first.stdout is not None and "gpunode-lock: taken" in first.stdout.readline()
    first.kill()
    first.wait()
    assert _gone(lock_dir / "lock.owner")
    assert (lock_dir / "lock").exists()


def test_a_run_waiting_on_a_lock_file_that_is_removed_takes_the_new_one(lock_dir, tmp_path,
                                                                        monkeypatch):
    """The second run waits on the first's lock file; the first's holder removes the folder
    as it ends; the second then takes a lock on the new file, which a third run sees held."""
    monkeypatch.setattr(lock, "STATE_DIR", str(tmp_path / "no-state"))
    monkeypatch.setattr(lock, "LOCK_WAIT_S", 20)
    first = _run_process("aaaa1111")
    assert first.stdout is not None and "gpunode-lock: taken" in first.stdout.readline()
    second = _run_process("bbbb2222")
    time.sleep(1.0)  # the second now waits in flock on the first's file
    first.kill()
    first.wait()
    try:
        assert second.stdout is not None and "gpunode-lock: taken" in second.stdout.readline()
        assert (lock_dir / "lock.owner").read_text().startswith("run=bbbb2222 ")
        monkeypatch.setattr(lock, "LOCK_WAIT_S", 1)
        assert "gpunode-lock: held: run=bbbb2222 " in _take("cccc3333")
    finally:
        second.kill()
        second.wait()

"""The MaxReadReq refusals of this boot, read by the real shell command from a scratch folder."""

from __future__ import annotations

import subprocess

from gpunode.facts.pcie_refusals import REFUSED_DIR, MaxReadReqRefusals


def test_refusals_are_read_per_device_with_shell_builtins(tmp_path):
    (tmp_path / "0000:01:00.0").write_text("4096\n")
    (tmp_path / "0000:02:00.0").write_text("512")  # no final newline
    (tmp_path / "not-a-file").mkdir()
    fact = MaxReadReqRefusals()
    command = fact.command().replace(REFUSED_DIR, str(tmp_path))
    assert "$(" not in command  # no process per device
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    assert fact.process(out.stdout.splitlines()) == {"0000:01:00.0": 4096, "0000:02:00.0": 512}


def test_no_refusals_when_the_folder_is_missing(tmp_path):
    fact = MaxReadReqRefusals()
    command = fact.command().replace(REFUSED_DIR, str(tmp_path / "none"))
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    assert fact.process(out.stdout.splitlines()) == {}

"""Paths gpunode writes from user data (issue 28, item 4): validated before the run
(absolute once normalised, no '..' or hidden folder, not a system folder, under the allowed
roots) and written whole without following a symlink."""

from __future__ import annotations

import os

import pytest

from gpunode.profile.loader import ProfileError, load_profile
from gpunode.roles.audit.metrics import write_atomic
from gpunode.roles.audit.report import write_reports


@pytest.mark.parametrize("folder", ["/etc", "/boot", "/root/.ssh", "/etc/cron.d", "/usr/lib",
                                    "/var/lib/gpunode"])
def test_metrics_dir_in_a_system_folder_refused(folder):
    with pytest.raises(ProfileError) as err:
        load_profile("gpu-07", {"gpunode": {"metrics_dir": folder}})
    assert "gpu-07: gpunode.metrics_dir" in str(err.value) and repr(folder) in str(err.value)


@pytest.mark.parametrize(("key", "value"), [
    ("gpunode_metrics_file", "/etc/cron.d/gpunode"),
    ("gpunode_metrics_file", "/root/.ssh/authorized_keys"),
    ("gpunode_metrics_file", "../../etc/passwd"),
    ("gpunode_metrics_file", "/usr/local/bin/x.prom"),
    ("report_dir", "/boot"),
    ("report_dir", "/home/me/.ssh"),
])
def test_output_path_in_host_data_refused_before_the_run(key, value):
    with pytest.raises(ProfileError) as err:
        load_profile("gpu-07", {key: value})
    text = str(err.value)
    assert f"gpu-07: {key}" in text and repr(value) in text and "Fix:" in text


def test_good_output_paths_pass(tmp_path):
    load_profile("gpu-07", {"gpunode_metrics_file": "/var/lib/prometheus/node-exporter/a.prom",
                            "report_dir": "reports"})
    load_profile("gpu-07", {"gpunode_metrics_file": str(tmp_path / "{host}.prom")})


def test_a_symlink_target_is_replaced_never_followed(tmp_path):
    precious = tmp_path / "precious"
    precious.write_text("keep me\n")
    precious.chmod(0o600)
    link = tmp_path / "gpunode.prom"
    link.symlink_to(precious)
    write_atomic(link, "gpunode_up 1\n")
    assert precious.read_text() == "keep me\n" and oct(precious.stat().st_mode)[-3:] == "600"
    assert not link.is_symlink() and link.read_text() == "gpunode_up 1\n"


def test_a_symlinked_folder_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "via").symlink_to(real)
    with pytest.raises(ValueError, match="symlink"):
        write_atomic(tmp_path / "via" / "x.prom", "x\n")
    assert os.listdir(real) == []


def test_reports_do_not_follow_symlinks(tmp_path):
    precious = tmp_path / "precious"
    precious.write_text("keep me\n")
    (tmp_path / "gpu-07.json").symlink_to(precious)
    [path] = write_reports("gpu-07", [], ["json"], tmp_path)
    assert precious.read_text() == "keep me\n" and not path.is_symlink()

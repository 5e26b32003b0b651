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


def test_a_metrics_name_that_is_not_prom_is_refused(tmp_path):
    """node_exporter reads only *.prom: any other name is refused before the run (#42)."""
    with pytest.raises(ProfileError) as err:
        load_profile("gpu-07", {"gpunode_metrics_file": str(tmp_path / "metrics.txt")})
    text = str(err.value)
    assert "gpu-07: gpunode_metrics_file" in text and ".prom" in text and "Fix:" in text


def test_someone_elses_file_at_the_metrics_path_is_refused_and_kept(tmp_path):
    """An existing file gpunode did not write (someone's 0600 file) is refused, named, and left
    as it was; a file gpunode wrote before is fine (#42)."""
    theirs = tmp_path / "theirs.prom"
    theirs.write_text("node_custom_metric 1\n")
    theirs.chmod(0o600)
    with pytest.raises(ProfileError) as err:
        load_profile("gpu-07", {"gpunode_metrics_file": str(theirs)})
    text = str(err.value)
    assert f"gpu-07: gpunode_metrics_file: {theirs} exists and gpunode did not write it" in text
    assert "Fix:" in text
    assert theirs.read_text() == "node_custom_metric 1\n"
    assert oct(theirs.stat().st_mode)[-3:] == "600"
    ours = tmp_path / "gpu-07.prom"
    write_atomic(ours, "# HELP gpunode_setting_ok 1 when ...\n")
    load_profile("gpu-07", {"gpunode_metrics_file": str(tmp_path / "{host}.prom")})


def test_a_link_or_folder_at_the_metrics_path_is_refused(tmp_path):
    (tmp_path / "dir.prom").mkdir()
    (tmp_path / "link.prom").symlink_to(tmp_path / "elsewhere.prom")
    for name in ("dir.prom", "link.prom"):
        with pytest.raises(ProfileError, match="link or not a plain file"):
            load_profile("gpu-07", {"gpunode_metrics_file": str(tmp_path / name)})

"""gpunode's shipped rules in a real Prometheus: the lab guest runs Debian's
prometheus-node-exporter (the lab installs the .deb, cached on the controller: no apt download
in the guest) with its textfile collector reading gpunode-verify.timer's file; a Prometheus
server on the controller (loopback, a temporary data folder, a 2 s scrape of the textfile
collector, 1 s evaluation) scrapes it through an SSH tunnel to the guest's 127.0.0.1:9100 and
loads gpunode/prometheus/gpunode-rules.yml. A swappiness drifted by hand fires
GpunodeSettingDrifted; a converge clears it. The server, the tunnel and the package are gone
afterwards, and the timer is off again.

GPUNODE_METRICS_CAPTURE=DIR: also write the guest's converged and drifted metrics files there
(tests/data/metrics/, the input of tests/unit/test_prometheus_rules.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpunode.cli import RULES_FILE
from lab.image import cache_dir
from lab.vm import free_port
from tests.lab.guest import sh
from tests.lab.node_snapshot import METRICS_DIR
from tests.lab.pyinfra_cli import run_pyinfra

pytestmark = pytest.mark.lab

TIMER_ON = {"GPUNODE_LAB_VERIFY_TIMER": "1"}
PACKAGE = "prometheus-node-exporter"
EXPORTER_PORT = 9100  # Debian's default --web.listen-address
SETTING = "sysctl vm.swappiness"
DEADLINE_S = 120.0  # one run of the script + scrape (2 s) + evaluation (1 s), with TCG's margin
# Only the textfile collector is scraped (node_exporter's collect[] filter): the full set of
# collectors on a TCG guest under CI's load can outlast a short scrape timeout, and then no
# sample ever arrives (CI of 14b9653 timed out so).
SCRAPE = ("global: {scrape_interval: 2s, scrape_timeout: 2s, evaluation_interval: 1s}\n"
          "rule_files: [%s]\n"
          "scrape_configs:\n  - job_name: node\n"
          "    params: {'collect[]': [textfile]}\n"
          "    static_configs: [{targets: ['127.0.0.1:%d']}]\n")


def exporter_deb() -> Path:
    """The node_exporter .deb: cached under the lab's cache, else copied from the controller's
    apt archive, else fetched there once with `apt-get download` (a static Go binary: Debian
    12's build runs on 13 too)."""
    folder = cache_dir() / "node-exporter"
    found = sorted(folder.glob(f"{PACKAGE}_*.deb"))
    if found:
        return found[-1]
    folder.mkdir(parents=True, exist_ok=True)
    archived = sorted(Path("/var/cache/apt/archives").glob(f"{PACKAGE}_*_amd64.deb"))
    if archived:
        shutil.copy2(archived[-1], folder)
    else:
        subprocess.run(["apt-get", "download", PACKAGE], cwd=folder, check=True, timeout=300)
    return sorted(folder.glob(f"{PACKAGE}_*.deb"))[-1]


def api(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/{path}", timeout=5) as r:
        return json.load(r)["data"]


def drift_alerts(port: int) -> list[dict]:
    return [a for a in api(port, "alerts")["alerts"]
            if a["labels"]["alertname"] == "GpunodeSettingDrifted"
            and a["labels"].get("setting") == SETTING]


def targets(port: int) -> list[tuple[str, str]]:
    """Each scrape target's health and last error: what a timed-out wait reports."""
    return [(t["health"], t["lastError"]) for t in api(port, "targets")["activeTargets"]]


def wait_for(check, port: int, timeout: float = DEADLINE_S) -> float:
    """Poll check() every 0.5 s until true; the seconds it took."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < timeout, \
            f"not within {timeout} s; targets (health, last error): {targets(port)}"
        time.sleep(0.5)
    return time.monotonic() - start


@pytest.fixture
def prometheus(lab_vm, tmp_path) -> Iterator[int]:
    """node_exporter in the guest, the tunnel and Prometheus: the server's port."""
    if shutil.which("prometheus") is None:
        pytest.skip("prometheus not installed (Debian: apt-get install prometheus)")
    before = sh(lab_vm, "ls -d /var/lib/prometheus /var/lib/prometheus/node-exporter "
                "2>/dev/null; true").split()
    deb = exporter_deb()
    with deb.open("rb") as data:
        subprocess.run(lab_vm.ssh_argv(f"cat >/tmp/{deb.name}"), stdin=data, check=True,
                       timeout=60)
    sh(lab_vm, f"dpkg -i /tmp/{deb.name} >/dev/null && rm /tmp/{deb.name} && "
       f"systemctl is-active {PACKAGE}", timeout=300)
    local = free_port()
    tunnel = subprocess.Popen(lab_vm.ssh_argv()[:-1] + [
        "-N", "-o", "ExitOnForwardFailure=yes", "-L",
        f"127.0.0.1:{local}:127.0.0.1:{EXPORTER_PORT}", lab_vm.ssh_argv()[-1]])
    web = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(SCRAPE % (RULES_FILE, local))
    server = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{web}"],
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("w"))
    try:
        yield web
    finally:
        for process in (server, tunnel):
            process.terminate()
            process.wait(timeout=30)
        run = run_pyinfra("deploy/site.py", "-y", timeout=900)  # the timer off again
        lab_vm.ssh(f"dpkg --purge {PACKAGE} >/dev/null; for d in "
                   + " ".join(d for d in ("/var/lib/prometheus/node-exporter",
                                          "/var/lib/prometheus") if d not in before)
                   + "; do rmdir $d 2>/dev/null; done; true")
        assert run.returncode == 0, run.log[-3000:]


def capture(vm, name: str) -> str:
    text = sh(vm, f"cat {METRICS_DIR}/gpunode.prom")
    folder = os.environ.get("GPUNODE_METRICS_CAPTURE")
    if folder:
        Path(folder, name).write_text(text)
    return text


def test_a_drifted_setting_fires_in_prometheus_and_a_converge_clears_it(lab_vm, prometheus):
    run = run_pyinfra("deploy/site.py", "-y", env=TIMER_ON, timeout=900)
    assert run.returncode == 0, run.log[-3000:]
    sh(lab_vm, "systemctl start gpunode-verify.service")
    capture(lab_vm, "lab-converged.prom")
    wait_for(lambda: any(r["metric"].get("setting") == SETTING for r in
                         api(prometheus, "query?query=gpunode_setting_ok")["result"]), prometheus)
    time.sleep(2)  # one more evaluation
    assert drift_alerts(prometheus) == []
    groups = api(prometheus, "rules")["groups"]
    assert {g["name"] for g in groups} == {"gpunode.recording", "gpunode.alerts"}
    assert all(r["health"] == "ok" for g in groups for r in g["rules"]), groups

    drifted_at = time.monotonic()
    try:
        sh(lab_vm, "sysctl -qw vm.swappiness=60 && systemctl start gpunode-verify.service")
        capture(lab_vm, "lab-drifted.prom")
        wait_for(lambda: [a["state"] for a in drift_alerts(prometheus)] == ["firing"], prometheus)
        firing_s = time.monotonic() - drifted_at
        print(f"\ndrift -> GpunodeSettingDrifted firing: {firing_s:.1f} s")
        alert = drift_alerts(prometheus)[0]
        assert alert["labels"]["severity"] == "warning"
        assert SETTING in alert["annotations"]["summary"]
        assert "deploy/site.py" in alert["annotations"]["description"]
    finally:
        run = run_pyinfra("deploy/site.py", "-y", env=TIMER_ON, timeout=900)
    assert run.returncode == 0, run.log[-3000:]
    sh(lab_vm, "systemctl start gpunode-verify.service")
    wait_for(lambda: drift_alerts(prometheus) == [], prometheus)

"""gpunode's shipped Prometheus rules, checked and tested with Prometheus's own tool:
`promtool check rules` and `promtool test rules` (Debian's `prometheus` package; CI installs
it: .ci/run).

Input series: the metrics files the lab guest's gpunode-verify.timer wrote, converged and with
vm.swappiness drifted (tests/data/metrics/, captured by tests/lab/test_prometheus.py; see
tests/data/SOURCES.md), each sample with the labels node_exporter's scrape adds (instance,
job). What the lab guest cannot write (it has no GPU, no container, no
engine) is the converged file's series with one value changed, or a series of the shape the
writers use, named as such below. Every alert is shown to fire and to stay quiet.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gpunode.cli import RULES_FILE

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian: apt-get install prometheus; "
    "CI installs it in .ci/run)")

METRICS = Path(__file__).parents[1] / "data" / "metrics"
SCRAPE = {"instance": "lab:9100", "job": "node"}
GPU = {**SCRAPE, "source": "timer", "gpu": "0000:01:00.0"}  # the timer's GPU health shape
ENGINE = {**SCRAPE, "source": "audit", "engine": "vllm", "pid": "4242", "container": "lxc/101"}


def samples(name: str) -> dict[str, float]:
    """The file's samples as promtool series selectors (labels sorted, SCRAPE added)."""
    text = (METRICS / name).read_text()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[selector(sample.name, {**sample.labels, **SCRAPE})] = sample.value
    return out


def selector(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def series(values: dict[str, float], minutes: int = 90) -> list[dict]:
    """One sample a minute, constant, for `minutes` minutes."""
    return [{"series": key, "values": f"{value:g}x{minutes}"} for key, value in values.items()]


def with_value(values: dict[str, float], metric: str, value: float) -> dict[str, float]:
    """values with every sample of metric set to value."""
    return {k: (value if k.startswith(metric + "{") else v) for k, v in values.items()}


def firing(alert: str, labels: dict[str, str]) -> dict:
    return {"labels": selector("ALERTS", {"alertname": alert, "alertstate": "firing",
                                          **labels}), "value": 1}


def case(values: dict[str, float], alert: str, at: str, fired: list[dict],
         minutes: int = 90) -> dict:
    """A promtool test: ALERTS{alertname=alert, alertstate="firing"} at `at` is `fired`."""
    return {"interval": "1m", "input_series": series(values, minutes), "promql_expr_test": [{
        "expr": f'ALERTS{{alertname="{alert}",alertstate="firing"}}', "eval_time": at,
        "exp_samples": fired}]}


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(PROMTOOL), *args], capture_output=True, text=True, timeout=120)


def run_tests(tmp_path: Path, tests: list[dict]) -> None:
    path = tmp_path / "tests.yml"
    path.write_text(yaml.safe_dump({"rule_files": [str(RULES_FILE)],
                                    "evaluation_interval": "1m", "tests": tests}))
    done = promtool("test", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def converged() -> dict[str, float]:
    return samples("lab-converged.prom")


@pytest.fixture(scope="module")
def drifted() -> dict[str, float]:
    return samples("lab-drifted.prom")


def pending_settings(values: dict[str, float]) -> set[str]:
    """The settings the file marks as in place and waiting (gpunode_setting_pending 1)."""
    return {k.split('setting="', 1)[1].split('"', 1)[0] for k, v in values.items()
            if k.startswith("gpunode_setting_pending{") and v == 1}


@pytest.fixture(scope="module")
def rebooted(converged) -> dict[str, float]:
    """The converged file as the node writes it after the reboot it waits for (the guest's
    capture is before that reboot): its pending settings read back (gpunode_setting_ok 1, no
    gpunode_setting_pending), no P1 finding, no pending reboot. Derived, named here."""
    waiting = pending_settings(converged)
    assert waiting, "the converged capture has no pending setting: use it as is"
    out = {}
    for key, value in converged.items():
        if key.startswith("gpunode_setting_pending{"):
            continue
        if key.startswith("gpunode_setting_ok{") and any(f'setting="{s}"' in key
                                                         for s in waiting):
            value = 1
        if key.startswith("gpunode_findings{") and 'severity="P1"' in key:
            value = 0
        if key.startswith("gpunode_pending_reboot{"):
            value = 0
        out[key] = value
    return out


def test_promtool_check_rules_passes():
    done = promtool("check", "rules", str(RULES_FILE))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_severity_summary_description_and_runbook():
    rules = [r for g in yaml.safe_load(RULES_FILE.read_text())["groups"] for r in g["rules"]]
    alerts = [r for r in rules if "alert" in r]
    assert {r["alert"] for r in alerts} == {
        "GpunodeSettingDrifted", "GpunodeNodeNotReady", "GpunodePendingReboot",
        "GpunodeContainerRestartPending", "GpunodeGpuCriticalXid", "GpunodeGpuRowRemapPending",
        "GpunodeGpuLinkDowntrained", "GpunodeCheckStale", "GpunodeEngineBelowDecodeCeiling"}
    for rule in alerts:
        assert rule["labels"]["severity"] in {"critical", "warning"}, rule["alert"]
        assert "{{ $labels.instance }}" in rule["annotations"]["summary"], rule["alert"]
        assert "Fix: " in rule["annotations"]["description"], rule["alert"]
        assert rule["annotations"]["runbook"], rule["alert"]


def test_the_lab_files_are_converged_and_drifted(converged, drifted):
    key = selector("gpunode_setting_ok", {**SCRAPE, "setting": "sysctl vm.swappiness",
                                          "source": "timer"})
    assert (converged[key], drifted[key]) == (1, 0)


def test_setting_drifted_fires_on_the_drifted_file_with_its_text(tmp_path, converged, drifted,
                                                               rebooted):
    """Only the swappiness drifted; the converged capture's cmdline settings, in the
    bootloader's config and waiting for the reboot, are pending, not drift."""
    labels = {**SCRAPE, "setting": "sysctl vm.swappiness", "source": "timer"}
    waiting = pending_settings(drifted)
    others = [k for k, v in drifted.items() if k.startswith("gpunode_setting_ok{") and v == 0
              and not any(f'setting="{s}"' in k for s in waiting)]
    assert others == [selector("gpunode_setting_ok", labels)]
    assert pending_settings(converged) == waiting == {"cmdline processor.max_cstate",
                                                      "cmdline amd_pstate"}
    run_tests(tmp_path, [
        case(drifted, "GpunodeSettingDrifted", "1m",
             [firing("GpunodeSettingDrifted", {**labels, "severity": "warning"})]),
        case(converged, "GpunodeSettingDrifted", "1m", []),
        case(rebooted, "GpunodeSettingDrifted", "1m", []),
        {"interval": "1m", "input_series": series(drifted), "alert_rule_test": [{
            "eval_time": "1m", "alertname": "GpunodeSettingDrifted", "exp_alerts": [{
                "exp_labels": {**labels, "severity": "warning"},
                "exp_annotations": annotations("GpunodeSettingDrifted", labels)}]}]},
    ])


def annotations(alert: str, labels: dict[str, str]) -> dict[str, str]:
    """The alert's annotations with $labels filled in (the templates use nothing else)."""
    rule = next(r for g in yaml.safe_load(RULES_FILE.read_text())["groups"]
                for r in g["rules"] if r.get("alert") == alert)
    out = {}
    for key, text in rule["annotations"].items():
        for name, value in labels.items():
            text = text.replace(f"{{{{ $labels.{name} }}}}", value)
        out[key] = text
    return out


def test_node_not_ready_fires_on_p0_and_p1(tmp_path, converged, drifted, rebooted):
    """The converged capture waits for its reboot (P1: not ready yet); after it, quiet."""
    p0 = {**SCRAPE, "source": "timer", "finding": "P0", "severity": "critical"}
    p1 = {**SCRAPE, "source": "timer", "finding": "P1", "severity": "warning"}
    run_tests(tmp_path, [
        case(drifted, "GpunodeNodeNotReady", "1m", [firing("GpunodeNodeNotReady", p0),
                                                    firing("GpunodeNodeNotReady", p1)]),
        case(converged, "GpunodeNodeNotReady", "1m", [firing("GpunodeNodeNotReady", p1)]),
        case(rebooted, "GpunodeNodeNotReady", "1m", []),
    ])


@pytest.mark.parametrize(("metric", "alert", "extra"), [
    ("gpunode_pending_reboot", "GpunodePendingReboot", {}),
    ("gpunode_pending_restart", "GpunodeContainerRestartPending", {}),
])
def test_waiting_work_fires_after_24h_only(tmp_path, rebooted, metric, alert, extra):
    """The timer's file has no gpunode_pending_restart (the audit writes it): its shape, with
    source="audit". The converged capture's own pending reboot is the reboot case."""
    waiting = with_value(rebooted, metric, 1)
    if not any(k.startswith(metric + "{") for k in waiting):
        waiting[selector(metric, {**SCRAPE, "source": "audit"})] = 1
    labels = next(k for k in waiting if k.startswith(metric + "{"))
    label_map = dict(part.split("=", 1) for part in labels[len(metric) + 1:-1].split(","))
    label_map = {k: v.strip('"') for k, v in label_map.items()}
    fired = [firing(alert, {**label_map, "severity": "warning"})]
    minutes = 26 * 60
    run_tests(tmp_path, [
        case(waiting, alert, "23h", [], minutes),
        case(waiting, alert, "25h", fired, minutes),
        case(rebooted, alert, "25h", [], minutes),
    ])


@pytest.mark.parametrize(("metric", "alert", "severity"), [
    ("gpunode_gpu_xid_critical", "GpunodeGpuCriticalXid", "critical"),
    ("gpunode_gpu_remap_pending", "GpunodeGpuRowRemapPending", "critical"),
    ("gpunode_gpu_link_downtrained", "GpunodeGpuLinkDowntrained", "warning"),
])
def test_gpu_health_alerts(tmp_path, converged, metric, alert, severity):
    """The lab guest has no GPU: the converged file plus the timer's GPU sample (its shape:
    source="timer", gpu=BDF)."""
    key = selector(metric, GPU)
    run_tests(tmp_path, [
        case({**converged, key: 1}, alert, "1m", [firing(alert, {**GPU,
                                                                 "severity": severity})]),
        case({**converged, key: 0}, alert, "1m", []),
    ])


def test_check_stale_fires_after_twice_the_interval(tmp_path, converged):
    """The file's timestamp moved to promtool's time 0 (its clock starts there); the
    interval is the file's own (gpunode_verify_interval_seconds)."""
    stamp = next(k for k in converged
                 if k.startswith("gpunode_last_check_timestamp_seconds{"))
    interval = next(v for k, v in converged.items()
                    if k.startswith("gpunode_verify_interval_seconds{"))
    values = {**converged, stamp: 0}
    labels = {**SCRAPE, "source": "timer", "severity": "warning"}
    minutes = int(3 * interval // 60) + 5
    before, after = int(2 * interval // 60) - 1, int(2 * interval // 60) + 1
    run_tests(tmp_path, [
        case(values, "GpunodeCheckStale", f"{before}m", [], minutes),
        case(values, "GpunodeCheckStale", f"{after}m", [firing("GpunodeCheckStale", labels)],
             minutes),
    ])


def test_engine_below_decode_ceiling_fires_after_15m(tmp_path, converged):
    """gpunode_engine_decode_efficiency_ratio{engine,pid,container} (the audit's engine
    series): synthetic samples with its labels."""
    slow = {**converged, selector("gpunode_engine_decode_efficiency_ratio", ENGINE): 0.3}
    fast = {**converged, selector("gpunode_engine_decode_efficiency_ratio", ENGINE): 0.8}
    fired = [firing("GpunodeEngineBelowDecodeCeiling", {**ENGINE, "severity": "warning"})]
    run_tests(tmp_path, [
        case(slow, "GpunodeEngineBelowDecodeCeiling", "10m", []),
        case(slow, "GpunodeEngineBelowDecodeCeiling", "20m", fired),
        case(fast, "GpunodeEngineBelowDecodeCeiling", "20m", []),
    ])


def test_recording_rules(tmp_path, drifted):
    run_tests(tmp_path, [{"interval": "1m", "input_series": series(drifted),
                          "promql_expr_test": [{
        "expr": "gpunode:settings_drifted:count", "eval_time": "1m",
        "exp_samples": [{"labels": selector("gpunode:settings_drifted:count",
                                            {**SCRAPE, "source": "timer"}), "value": 1}]}]}])

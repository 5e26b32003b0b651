"""The engines' own numbers (opt-in): vLLM's and SGLang's Prometheus /metrics, read on the node.

Only where the engine itself listens (its --host/--port, or its default port on the host's
loopback when it listens on every address and runs on the host itself); each request is
bounded by `timeout_s` (curl --max-time, or python3's urllib where curl is missing) and
reads at most METRICS_BYTES. GET only: nothing is sent but the request.

Read: the mean time per output token (histogram sum / count: vLLM
`vllm:time_per_output_token_seconds` or its successor `vllm:inter_token_latency_seconds`,
SGLang `sglang:time_per_output_token_seconds`) and the requests running (vLLM
`vllm:num_requests_running`, SGLang `sglang:num_running_reqs`); SGLang 0.5.4 and later
spell the prefix `sglang_`.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
import shlex

from pydantic import BaseModel, ConfigDict
from pyinfra.api import FactBase

from gpunode.facts.engine_read import EngineProcess

METRICS_BYTES = 1048576
RECORD = "@@engine-metrics:"
TPOT = {"vllm": ("vllm:time_per_output_token_seconds", "vllm:inter_token_latency_seconds"),
        "sglang": ("sglang:time_per_output_token_seconds", "sglang_time_per_output_token_seconds")}
RUNNING = {"vllm": ("vllm:num_requests_running",),
           "sglang": ("sglang:num_running_reqs", "sglang_num_running_reqs")}
_WILDCARD = {"", "0.0.0.0", "::", "[::]"}
_PYTHON_GET = ("import sys, urllib.request as u; "
               "sys.stdout.buffer.write(u.urlopen(sys.argv[1], timeout=int(sys.argv[2])).read())")
_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})$")


class EngineNumbers(BaseModel):
    model_config = ConfigDict(frozen=True)

    url: str
    time_per_output_token_s: float | None = None
    requests_running: float | None = None
    error: str | None = None


def metrics_url(p: EngineProcess) -> tuple[str | None, str]:
    """(the URL of its /metrics, or None and why not)."""
    s = p.settings
    if p.engine not in TPOT:
        return None, f"{p.engine}: metrics not read"
    if not s.metrics:
        return None, "metrics off (SGLang: --enable-metrics)"
    host = (s.host or "").strip()
    if host in _WILDCARD:
        if p.where != "host":
            return None, f"listens on every address inside {p.where}: not the host's loopback"
        host = "127.0.0.1"
    try:
        address = ipaddress.ip_address(host.strip("[]"))
        host = f"[{address}]" if address.version == 6 else str(address)
        loopback = address.is_loopback
    except ValueError:
        if not _HOSTNAME_RE.match(host):
            return None, f"--host {host!r}: not an address"
        loopback = host == "localhost"
    if loopback and p.where != "host":
        return None, f"listens on the loopback of {p.where}: not reachable from the host"
    if s.port is None or not 0 < s.port < 65536:
        return None, "no port"
    return f"http://{host}:{s.port}/metrics", ""


def metrics_command(targets: list[tuple[int, str]], timeout_s: int) -> str:
    parts = []
    for pid, url in targets:
        q = shlex.quote(url)
        t = int(timeout_s)
        fetch = (f"if command -v curl >/dev/null; then curl -fsS --max-time {t} {q}; "
                 f"else timeout {t} python3 -c {shlex.quote(_PYTHON_GET)} {q} {t}; fi")
        parts.append(f"echo '{RECORD}{pid}'; ( {fetch} ) 2>/dev/null | head -c {METRICS_BYTES} "
                     "| base64 -w0; echo")
    return "; ".join(parts) + "; true" if parts else "true"


_SAMPLE_RE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_prometheus(text: str) -> dict[str, float]:
    """Prometheus text -> {metric name: sum over its label sets}."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE_RE.match(line.strip())
        if not match or line.startswith("#"):
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        sums[match.group(1)] = sums.get(match.group(1), 0.0) + value
    return sums


def engine_numbers(engine: str, url: str, text: str) -> EngineNumbers:
    if not text.strip():
        return EngineNumbers(url=url, error="no answer (not listening, or timed out)")
    sums = parse_prometheus(text)
    tpot = None
    for name in TPOT.get(engine, ()):
        count = sums.get(f"{name}_count")
        if count:
            tpot = sums.get(f"{name}_sum", 0.0) / count
            break
    running = next((sums[name] for name in RUNNING.get(engine, ()) if name in sums), None)
    return EngineNumbers(url=url, time_per_output_token_s=tpot, requests_running=running)


class EngineMetrics(FactBase):
    """{pid: EngineNumbers} for the engines' /metrics (see the module docstring)."""

    @staticmethod
    def default() -> dict:
        return {}

    def command(self, targets: list[tuple[int, str, str]] | None = None,
                timeout_s: int = 5) -> str:
        self.targets = {pid: (engine, url) for pid, engine, url in targets or []}
        return metrics_command([(pid, url) for pid, (_, url) in self.targets.items()],
                               int(timeout_s))

    def process(self, output: list[str]) -> dict[int, EngineNumbers]:
        return parse_metrics_output(output, getattr(self, "targets", {}))


def parse_metrics_output(lines: list[str], targets: dict[int, tuple[str, str]]
                         ) -> dict[int, EngineNumbers]:
    found: dict[int, EngineNumbers] = {}
    pid: int | None = None
    for line in lines:
        if line.startswith(RECORD):
            text = line[len(RECORD):].strip()
            pid = int(text) if text.isdigit() else None
        elif pid is not None and pid in targets:
            engine, url = targets[pid]
            try:
                body = base64.b64decode(line.strip(), validate=True).decode("utf-8", "replace")
            except (binascii.Error, ValueError):
                body = ""
            found[pid] = engine_numbers(engine, url, body)
            pid = None
    return found

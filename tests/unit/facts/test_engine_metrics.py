"""The engines' own /metrics: the fact's command run here in a real shell against a loopback
stand-in server (curl, and python3 where curl is missing), bounded; the addresses it will
and won't read."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpunode.facts.engine_metrics import (
    engine_numbers,
    metrics_command,
    metrics_url,
    parse_metrics_output,
)
from gpunode.facts.engine_read import EngineProcess
from gpunode.facts.engines import parse_settings

DATA = Path(__file__).resolve().parents[2] / "data" / "engines"
VLLM = (DATA / "vllm-metrics.txt").read_text()
SGLANG = (DATA / "sglang-metrics.txt").read_text()


def engine(argv: list[str], **fields) -> EngineProcess:
    settings = parse_settings(argv)
    assert settings is not None
    name = "sglang" if "sglang.launch_server" in argv else "vllm"
    return EngineProcess(pid=fields.pop("pid", 7), engine=name, argv=argv, settings=settings,
                         **fields)


@pytest.fixture
def server():
    """A loopback stand-in engine that serves /metrics (GET only) and counts the requests."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            seen.append(f"{self.command} {self.path}")
            body = VLLM.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1], seen
    httpd.shutdown()


def run(command: str, env: dict[str, str] | None = None) -> list[str]:
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30,
                         env=env, check=True)
    return out.stdout.splitlines()


def test_documented_metrics_give_tpot_and_running():
    vllm = engine_numbers("vllm", "u", VLLM)
    assert vllm.time_per_output_token_s == pytest.approx(4.6 / 200)
    assert vllm.requests_running == 3.0
    sglang = engine_numbers("sglang", "u", SGLANG)
    assert sglang.time_per_output_token_s == pytest.approx(866964.5791549598 / 7.557572e6)
    assert sglang.requests_running == 4.0
    newer = engine_numbers("sglang", "u", SGLANG.replace("sglang:", "sglang_"))
    assert newer.requests_running == 4.0  # SGLang >= 0.5.4 spells the prefix sglang_
    assert engine_numbers("vllm", "u", "").error.startswith("no answer")


def test_reads_the_engines_own_address_with_curl(server):
    port, seen = server
    p = engine(["vllm", "serve", "m", "--host", "127.0.0.1", "--port", str(port)])
    url, _ = metrics_url(p)
    assert url == f"http://127.0.0.1:{port}/metrics"
    lines = run(metrics_command([(7, url)], 5))
    numbers = parse_metrics_output(lines, {7: ("vllm", url)})[7]
    assert numbers.requests_running == 3.0 and numbers.error is None
    assert seen == ["GET /metrics"]


def test_python_where_curl_is_missing(server, tmp_path):
    port, seen = server
    for tool in ("sh", "head", "base64", "timeout"):
        found = shutil.which(tool)
        assert found, tool
        os.symlink(found, tmp_path / tool)
    os.symlink(sys.executable, tmp_path / "python3")
    url = f"http://127.0.0.1:{port}/metrics"
    lines = run(metrics_command([(7, url)], 5), env={"PATH": str(tmp_path)})
    numbers = parse_metrics_output(lines, {7: ("vllm", url)})[7]
    assert numbers.time_per_output_token_s == pytest.approx(0.023)
    assert seen == ["GET /metrics"]


def test_an_engine_that_never_answers_is_bounded():
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # accepts the connection, never answers
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/metrics"
    started = time.monotonic()
    lines = run(metrics_command([(7, url)], 1))
    assert time.monotonic() - started < 10
    assert parse_metrics_output(lines, {7: ("vllm", url)})[7].error.startswith("no answer")
    silent.close()


def test_addresses_it_will_not_read():
    wildcard_ct = engine(["vllm", "serve", "m"], vmid=110)
    assert metrics_url(wildcard_ct)[0] is None
    loopback_ct = engine(["vllm", "serve", "m", "--host", "127.0.0.1"], vmid=110)
    assert "loopback of CT 110" in metrics_url(loopback_ct)[1]
    sglang_off = engine(["python3", "-m", "sglang.launch_server", "--model-path", "m"])
    assert metrics_url(sglang_off) == (None, "metrics off (SGLang: --enable-metrics)")
    odd = engine(["vllm", "serve", "m", "--host", "$(reboot)"])
    assert metrics_url(odd)[0] is None
    on_host = engine(["vllm", "serve", "m"])
    assert metrics_url(on_host)[0] == "http://127.0.0.1:8000/metrics"
    ct_address = engine(["python3", "-m", "sglang.launch_server", "--enable-metrics",
                         "--host", "10.0.0.5"], vmid=110)
    assert metrics_url(ct_address)[0] == "http://10.0.0.5:30000/metrics"

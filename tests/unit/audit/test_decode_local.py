"""The decode part end to end on @local (issue 40's black-box test): `pyinfra @local
deploy/audit.py` through the real CLI, the real one read and the real metrics read, against

- a stand-in engine: a process whose argument vector is a real `vllm serve --model DIR ...`
  line (an executable named `vllm` run by this Python) that serves the captured vLLM /metrics
  text (tests/data/engines/vllm-metrics.txt) on the loopback port of its --port;
- its --model directory: Llama-3.1-8B's real config.json (tests/data/decode) and its four
  safetensors shards as sparse files of their real sizes (tests/data/SOURCES.md);
- a stand-in nvidia-smi first on PATH that prints a captured `nvidia-smi -q -x`.

Hand-checked figures (docs/decode.md's step):
- Llama-3.1-8B: 8,030,261,248 weights; a step reads all but the embedding table (128,256 x
  4,096 = 525,336,576): 7,504,924,672; the shards hold 16,060,556,376 bytes, so a step reads
  16,060,556,376 x 7,504,924,672 / 8,030,261,248 = 15,009,881,008 bytes;
- KV a token: 32 layers x 2 x 8 KV heads x 128 x bytes (fp8: 1 -> 65,536; auto: 2 -> 131,072),
  x 8,192 tokens of --max-model-len;
- A100-SXM4-40GB (1,555 GB/s): weights 9.6527 ms, KV (fp8) 0.3453 ms -> 100.02 tokens/s;
- measured: 200 tokens in 4.6 s (the capture's histogram) -> 43.478 tokens/s, efficiency 0.4347.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from pyinfra.context import ctx_config, ctx_host, ctx_inventory, ctx_state

from gpunode.facts.engine_read import container_of
from tests.unit.test_deploys_local import _cli_mode  # noqa: F401 (fixture)
from tests.unit.test_deploys_local_cli import cli_log

DATA = Path(__file__).resolve().parents[2] / "data"
SHARDS = {"model-00001-of-00004.safetensors": 4_976_698_672,
          "model-00002-of-00004.safetensors": 4_999_802_720,
          "model-00003-of-00004.safetensors": 4_915_916_176,
          "model-00004-of-00004.safetensors": 1_168_138_808}
"""meta-llama/Llama-3.1-8B's shards and their sizes on the Hub (tests/data/SOURCES.md)."""
READ_BYTES = sum(SHARDS.values()) * 7_504_924_672 / 8_030_261_248
MEASURED = 200 / 4.6  # the capture's vllm:time_per_output_token_seconds count / sum

ENGINE = '''#!{python}
"""Stand-in for `vllm serve`: serves a captured /metrics text on --host/--port."""
import http.server
import sys

args = sys.argv[1:]
host, port = args[args.index("--host") + 1], int(args[args.index("--port") + 1])
body = open({metrics!r}, "rb").read()


class Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/metrics":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.HTTPServer((host, port), Metrics).serve_forever()
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def node(tmp_path, monkeypatch):
    """bin/ first on PATH (nvidia-smi, vllm); start(smi capture, model dir, flags) -> pid."""
    import subprocess

    if any(container_of(Path("/proc/self/cgroup").read_text())):
        pytest.skip("this test runs in a container: the audit reads no loopback inside one")
    binary = tmp_path / "bin"
    binary.mkdir()
    engine = binary / "vllm"
    engine.write_text(ENGINE.format(python=sys.executable,
                                    metrics=str(DATA / "engines" / "vllm-metrics.txt")))
    engine.chmod(0o755)
    monkeypatch.setenv("PATH", f"{binary}{os.pathsep}{os.environ['PATH']}")
    started: list[subprocess.Popen] = []

    def start(smi: str, model: Path, *flags: str) -> int:
        (binary / "nvidia-smi").write_text(
            f'#!/bin/sh\n[ "$*" = "-q -x" ] || exit 2\ncat {DATA / "nvidia" / smi}\n')
        (binary / "nvidia-smi").chmod(0o755)
        port = free_port()
        proc = subprocess.Popen([str(engine), "serve", "--model", str(model),
                                 "--tensor-parallel-size", "1", "--host", "127.0.0.1",
                                 "--port", str(port), *flags], cwd=tmp_path)
        started.append(proc)
        deadline = time.monotonic() + 10
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1).read()
                return proc.pid
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "engine not up"
                time.sleep(0.05)

    yield tmp_path, start
    for proc in started:
        proc.kill()
        proc.wait()


def model_dir(root: Path, config: bool = True) -> Path:
    model = root / "models" / "Llama-3.1-8B"
    model.mkdir(parents=True)
    if config:
        shutil.copy(DATA / "decode" / "llama-3.1-8b.config.json", model / "config.json")
    for name, size in SHARDS.items():
        with open(model / name, "wb") as f:
            f.truncate(size)  # sparse: the read stats the files, never reads them
    return model


def audit_decode(root: Path, pid: int, profile: dict | None = None) -> dict:
    """`pyinfra @local deploy/audit.py --dry` with the engine metrics opted in: the JSON
    report's decode object of engine `pid`."""
    run = root / f"run{len(list(root.glob('run*')))}"  # its own inventory file: a new run's
    run.mkdir()
    reports = run / "reports"
    data = {"report": "json", "report_dir": str(reports), "gpunode_audit_engine_metrics": 1,
            **({"gpunode": profile} if profile else {})}
    try:
        cli_log(run, ["deploy/audit.py", "--dry"], data)
    finally:  # a second run in this process starts from no context, as a new pyinfra would
        for context in (ctx_state, ctx_host, ctx_inventory, ctx_config):
            context.reset()
    report = json.loads(next(reports.glob("*.json")).read_text())
    engines = {e["pid"]: e for e in report["engines"]}
    return engines[pid]["decode"]


def test_the_audit_reports_the_decode_of_a_running_engine(node):
    root, start = node
    pid = start("nvidia_smi_q_x_a100_sxm4_40gb_mig_510.xml", model_dir(root),
                "--max-model-len", "8192", "--kv-cache-dtype", "fp8")
    got = audit_decode(root, pid)
    terms = got["terms_ms"]
    assert terms["weights"] == pytest.approx(READ_BYTES / 1555e9 * 1e3)
    assert terms["weights"] == pytest.approx(9.6527, abs=1e-4)
    assert terms["kv"] == pytest.approx(8192 * 65_536 / 1555e9 * 1e3)
    assert (terms["comm"], terms["launch"]) == (0.0, 0.0)
    assert got["ceiling_tokens_per_s"] == pytest.approx(100.02, abs=0.01)
    assert got["binding"] == "weights"
    assert got["measured_tokens_per_s"] == pytest.approx(MEASURED)
    assert got["efficiency"] == pytest.approx(MEASURED / got["ceiling_tokens_per_s"])
    assert got["efficiency"] == pytest.approx(0.4347, abs=1e-4)
    assert got["window"] == "since engine start" and got["missing"] == []
    inputs = {k: (v["value"], v["source"]) for k, v in got["inputs"].items()}
    model = str(root / "models" / "Llama-3.1-8B")
    assert inputs["weights_bytes"] == (sum(SHARDS.values()), f"4 weight files in {model}")
    assert inputs["total_params"] == (8_030_261_248, f"counted from config.json in {model}")
    assert inputs["read_params_per_token"][0] == 7_504_924_672
    assert inputs["gpu"] == ("NVIDIA A100 SXM4 40GB", "nvidia-smi")
    assert inputs["memory_bandwidth_gb_s"][0] == 1555
    assert inputs["memory_bandwidth_gb_s"][1].startswith("gpus.yaml: https://www.nvidia.com/")
    assert inputs["kv_dtype_bytes"] == (1, "--kv-cache-dtype fp8")
    assert inputs["context"] == (8192, "--max-model-len")
    assert inputs["tp"] == (1, "--tensor-parallel-size")
    assert inputs["eager"] == (False, "engine default")


def test_profile_keys_fill_the_config_and_the_bandwidth(node):
    """No config.json beside the shards, a GPU not in the table (Tesla P100): the profile's
    decode_model_config (a file on the node) and decode_gpu_bandwidth_gb_s (732 GB/s, the
    P100 PCIe 16 GB's datasheet) give the inputs, marked as the profile's. KV auto: 2 bytes.
    Weights 15,009,881,008 / 732e9 = 20.505 ms, KV 8,192 x 131,072 / 732e9 = 1.4669 ms ->
    45.51 tokens/s."""
    root, start = node
    config = root / "elsewhere" / "config.json"
    config.parent.mkdir()
    shutil.copy(DATA / "decode" / "llama-3.1-8b.config.json", config)
    pid = start("nvidia_smi_q_x_tesla_p100_510.xml", model_dir(root, config=False),
                "--max-model-len", "8192")
    without = audit_decode(root, pid)
    assert without["ceiling_tokens_per_s"] is None
    how = {m["input"]: m["how"] for m in without["missing"]}
    assert "decode_model_config" in how["model_config"]
    assert "decode_gpu_bandwidth_gb_s" in how["gpu"]
    got = audit_decode(root, pid, {"decode_model_config": str(config),
                                   "decode_gpu_bandwidth_gb_s": 732})
    assert got["missing"] == [], got["missing"]
    assert got["terms_ms"]["weights"] == pytest.approx(READ_BYTES / 732e9 * 1e3)
    assert got["terms_ms"]["kv"] == pytest.approx(8192 * 131_072 / 732e9 * 1e3)
    assert got["ceiling_tokens_per_s"] == pytest.approx(45.51, abs=0.01)
    inputs = {k: (v["value"], v["source"]) for k, v in got["inputs"].items()}
    assert inputs["memory_bandwidth_gb_s"] == (732, "profile: decode_gpu_bandwidth_gb_s")
    assert inputs["total_params"] == (
        8_030_261_248, f"counted from profile: decode_model_config {config} (read on the node)")
    assert inputs["kv_dtype_bytes"][0] == 2
    assert inputs["kv_dtype_bytes"][1].startswith("engine default (--kv-cache-dtype auto)")


GGUF_BYTES = 7_160_000_000
"""TheBloke/Llama-2-7B-GGUF's llama-2-7b.Q8_0.gguf: 7.16 GB on its model card
(tests/data/SOURCES.md)."""


def test_a_gguf_model_is_read_from_its_header(node):
    """vLLM --model FILE.gguf, no config.json: the shape comes from the file's header on the
    node (its first bytes: llama.cpp's real Llama-2 GGUF, grown sparse to the Q8_0 file's size).
    Llama-2-7B: 6,738,415,616 weights, a step reads all but the 32,000 x 4,096 embedding table:
    6,607,343,616; 7.16e9 x 6,607,343,616 / 6,738,415,616 = 7,020,727,272 bytes / 1,555e9 =
    4.5149 ms; KV 32 x 2 x 32 x 128 x 2 = 524,288 bytes a token x 4,096 / 1,555e9 = 1.3810 ms
    -> 169.61 tokens/s."""
    root, start = node
    model = root / "models" / "llama-2-7b.Q8_0.gguf"
    model.parent.mkdir()
    shutil.copy(DATA / "decode" / "ggml-vocab-llama-spm.gguf", model)
    with open(model, "r+b") as f:
        f.truncate(GGUF_BYTES)
    pid = start("nvidia_smi_q_x_a100_sxm4_40gb_mig_510.xml", model, "--max-model-len", "4096")
    got = audit_decode(root, pid)
    assert got["missing"] == [], got["missing"]
    read = GGUF_BYTES * 6_607_343_616 / 6_738_415_616
    assert got["terms_ms"]["weights"] == pytest.approx(read / 1555e9 * 1e3)
    assert got["terms_ms"]["weights"] == pytest.approx(4.5149, abs=1e-4)
    assert got["terms_ms"]["kv"] == pytest.approx(4096 * 524_288 / 1555e9 * 1e3)
    assert got["ceiling_tokens_per_s"] == pytest.approx(169.61, abs=0.01)
    inputs = {k: (v["value"], v["source"]) for k, v in got["inputs"].items()}
    assert inputs["total_params"] == (6_738_415_616, f"counted from GGUF header of {model}")
    assert inputs["weights_bytes"] == (GGUF_BYTES, f"1 weight file in {model}")


@pytest.mark.parametrize(("key", "value", "said"), [
    ("decode_model_config", "/srv/models/../etc/config.json", "has a '..' part"),
    ("decode_model_config", "models/config.json", "is not an absolute path of a .json file"),
    ("decode_model_config", "/srv/m/config.json; reboot", "is not an absolute path"),
    ("decode_gpu_bandwidth_gb_s", 0, "greater than 0"),
    ("decode_gpu_bandwidth_gb_s", 50000, "less than or equal to 20000"),
])
def test_a_bad_decode_key_is_refused_naming_host_and_field(tmp_path, key, value, said):
    """Before anything on the node is read or changed: the host, the field and the fix."""
    log = cli_log(tmp_path, ["deploy/audit.py", "--dry"], {"gpunode": {key: value}},
                  exit_codes=(1,))
    flat = " ".join(log.split())
    assert f"@local: gpunode.{key}:" in flat and said in flat, log

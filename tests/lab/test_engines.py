"""The engine audit on real processes: stand-in engines in a real LXC container of the lab
guest, and one on the guest itself, found and checked by `pyinfra INVENTORY deploy/audit.py`
from the host's /proc, which changes nothing; with none running, the report says so.

The container: Debian's `lxc` (5.0) with the guest's own /usr bound read-only (python3 inside
it without a template download), a 16 MiB tmpfs on its /dev/shm, and Proxmox's cgroup layout
(`lxc.cgroup.dir.container = lxc/110`, as `pct start` writes it) so its processes' cgroup is
`/lxc/110/ns/...` like a Proxmox container's (where this LXC refuses those keys the
container runs under LXC's own `lxc.payload.NAME`, and the report names it so).

The stand-ins: a Python module at the engine's import path (vllm.entrypoints.openai.api_server,
sglang.launch_server, and a `vllm` console script for `vllm serve`) that sleeps; the one on the
guest itself serves vLLM-format /metrics on its --host/--port (loopback). Each is started with
a real argument vector and environment, in the container through lxc-attach (test setup; the
audit itself runs nothing in the container):
- vLLM (api_server module) TP 8 with CUDA_VISIBLE_DEVICES=0,1, --enforce-eager,
  NCCL_P2P_DISABLE=1, NCCL_DEBUG=INFO, memlock 64 KiB, torch for CUDA 12.8 in its prefix;
- SGLang TP 2 with --disable-cuda-graph and CUDA_VISIBLE_DEVICES=1,0 (no CUDA_DEVICE_ORDER);
- vLLM (`vllm serve`) with a malformed --config file;
- on the guest: vLLM `vllm serve` on 127.0.0.1:18000 (its /metrics read with the opt-in).
"""

from __future__ import annotations

import json
import shlex
import time

import pytest

from lab.vm import HOST_NAME
from tests.lab.guest import sh
from tests.lab.pyinfra_cli import run_pyinfra

pytestmark = pytest.mark.lab

NAME = "gpunode-engines-lab"
LXC_DIR = f"/var/lib/lxc/{NAME}"
ROOTFS = f"{LXC_DIR}/rootfs"
HOST_DIR = "/tmp/gpunode-engines"
PORT = 18000
STAND_IN = """\
import sys, time
args = sys.argv[1:]
if "--port" in args and "--host" in args:
    from http.server import BaseHTTPRequestHandler, HTTPServer
    body = (b'vllm:num_requests_running{model_name="m"} 2.0\\n'
            b'vllm:time_per_output_token_seconds_sum{model_name="m"} 5.0\\n'
            b'vllm:time_per_output_token_seconds_count{model_name="m"} 250.0\\n')
    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(body)
        def log_message(self, *a):
            pass
    HTTPServer((args[args.index("--host") + 1], int(args[args.index("--port") + 1])),
               H).serve_forever()
time.sleep(3600)
"""
SCRIPT = ("#!/usr/bin/python3\nimport runpy\n"
          "runpy.run_module('vllm.entrypoints.openai.api_server', run_name='__main__')\n")
TORCH = "from typing import Optional\n__version__ = '2.7.0+cu128'\ncuda: Optional[str] = '12.8'\n"
PROXMOX_CGROUP = ("lxc.cgroup.dir.monitor = lxc.monitor/110\n"
                  "lxc.cgroup.dir.container = lxc/110\n"
                  "lxc.cgroup.dir.container.inner = ns\n")


def put(vm, path: str, text: str, mode: str = "644") -> None:
    sh(vm, f"mkdir -p $(dirname {path}) && printf %s {shlex.quote(text)} > {path} && "
           f"chmod {mode} {path}")


def engine_tree(vm, root: str) -> None:
    """The stand-in modules at the engines' import paths under root."""
    for module in ("vllm/entrypoints/openai/api_server", "sglang/launch_server"):
        put(vm, f"{root}/{module}.py", STAND_IN)
        parts = module.split("/")[:-1]
        for i in range(len(parts)):
            put(vm, f"{root}/{'/'.join(parts[:i + 1])}/__init__.py", "")
    put(vm, f"{root}/bin/vllm", SCRIPT, "755")


def cleanup(vm) -> None:
    vm.ssh(f"lxc-stop -n {NAME} -k 2>/dev/null; lxc-destroy -n {NAME} 2>/dev/null; "
           f"rm -rf {LXC_DIR}; [ -f {HOST_DIR}/pid ] && kill $(cat {HOST_DIR}/pid); "
           f"rm -rf {HOST_DIR}; true",
           timeout=120)


def start_container(vm) -> str:
    """Start the container; 'CT 110' (Proxmox's cgroup layout) or 'LXC NAME'."""
    sh(vm, f"mkdir -p {ROOTFS}/usr {ROOTFS}/dev {ROOTFS}/proc {ROOTFS}/sys {ROOTFS}/tmp "
           f"{ROOTFS}/etc {ROOTFS}/models && cd {ROOTFS} && "
           "for d in bin sbin lib lib64; do [ -e /usr/$d ] && ln -sfn usr/$d $d; done; true")
    base = (
        f"lxc.uts.name = {NAME}\nlxc.rootfs.path = dir:{ROOTFS}\n"
        "lxc.include = /usr/share/lxc/config/common.conf\nlxc.net.0.type = empty\n"
        "lxc.apparmor.profile = unconfined\nlxc.init.cmd = /usr/bin/sleep 3600\n"
        "lxc.mount.entry = /usr usr none bind,ro,create=dir 0 0\n"
        "lxc.mount.entry = tmpfs dev/shm tmpfs rw,nosuid,nodev,size=16m,create=dir 0 0\n"
    )
    for extra, where in ((PROXMOX_CGROUP, "CT 110"), ("", f"LXC {NAME}")):
        put(vm, f"{LXC_DIR}/config", base + extra)
        rc, _, _ = vm.ssh(f"lxc-start -n {NAME} -d && lxc-wait -n {NAME} -s RUNNING -t 60",
                          timeout=90)
        if rc == 0:
            return where
        vm.ssh(f"lxc-stop -n {NAME} -k 2>/dev/null; true")
    raise AssertionError("the LXC container did not start")


def in_container(vm, env: str, command: str) -> None:
    inner = (f"ulimit -l 64; cd /opt/engines; exec env -i PATH=/usr/bin:/bin "
             f"PYTHONPATH=/opt/engines {env} {command} </dev/null >/dev/null 2>&1")
    detached = f"setsid sh -c {shlex.quote(inner)} &"
    sh(vm, f"lxc-attach -n {NAME} -- /bin/sh -c {shlex.quote(detached)}")


@pytest.fixture
def engines(lab_vm):
    vm = lab_vm
    rc, _, _ = vm.ssh("command -v lxc-start && command -v python3")
    if rc != 0:
        pytest.skip("the lab image has no lxc / python3 (rebuild the image)")
    cleanup(vm)
    started = time.monotonic()
    try:
        where = start_container(vm)
        engine_tree(vm, f"{ROOTFS}/opt/engines")
        put(vm, f"{ROOTFS}/opt/engines/bad.yaml", "tensor-parallel-size: [8\n")
        python = sh(vm, "python3 -c 'import sys; print(\"python%d.%d\" % sys.version_info[:2])'")
        put(vm, f"{ROOTFS}/opt/venv/lib/{python.strip()}/site-packages/torch/version.py", TORCH)
        sh(vm, f"mkdir -p {ROOTFS}/opt/venv/bin && ln -sfn /usr/bin/python3 "
               f"{ROOTFS}/opt/venv/bin/python")
        in_container(vm, "CUDA_VISIBLE_DEVICES=0,1 NCCL_P2P_DISABLE=1 NCCL_DEBUG=INFO",
                     "/opt/venv/bin/python -m vllm.entrypoints.openai.api_server "
                     "--model /models/llama-70b --tensor-parallel-size 8 --enforce-eager")
        in_container(vm, "CUDA_VISIBLE_DEVICES=1,0",
                     "python3 -m sglang.launch_server --model-path /models/qwen --tp 2 "
                     "--disable-cuda-graph")
        in_container(vm, "", "/opt/engines/bin/vllm serve /models/qwen --config "
                             "/opt/engines/bad.yaml")
        engine_tree(vm, HOST_DIR)
        sh(vm, f"cd {HOST_DIR}; PYTHONPATH={HOST_DIR} setsid {HOST_DIR}/bin/vllm serve "
               f"/models/small --host 127.0.0.1 --port {PORT} </dev/null >/dev/null 2>&1 & "
               f"echo $! > {HOST_DIR}/pid")
        time.sleep(3)
        yield vm, where
    finally:
        cleanup(vm)
        print(f"\nengines lab test: {time.monotonic() - started:.0f} s")


def pids(vm) -> list[str]:
    """The stand-ins' pids and command lines (to prove the audit left them as they were)."""
    return sorted(line.strip() for line in sh(vm, "ps -eo pid,args").splitlines()
                  if "/models/" in line)


def report(tmp_path) -> dict:
    return json.loads((tmp_path / f"{HOST_NAME}.json").read_text())


def test_audit_finds_each_stand_in_engine_and_changes_nothing(engines, tmp_path):
    vm, where = engines
    before = pids(vm)
    config = sh(vm, f"sha1sum {LXC_DIR}/config")
    assert len(before) == 4, before
    prom = tmp_path / "audit-{host}.prom"
    run = run_pyinfra("deploy/audit.py", "-y", "--data", "report=json", "--data",
                      f"report_dir={tmp_path}", "--data", "gpunode_audit_engine_metrics=1",
                      "--data", f"gpunode_metrics_file={prom}", timeout=900)
    assert run.returncode == 1, run.log[-3000:]  # P0s open: the audit fails the host
    data = report(tmp_path)
    checks = {c["name"]: c for c in data["checks"]}
    rows = {(r["engine"], r["where"], r["model"]): r for r in data["engines"]}

    vllm = rows[("vllm", where, "/models/llama-70b")]
    v = f": vllm {vllm['pid']} ({where})"
    assert checks["CUDA graphs" + v]["status"] == "P0"
    assert "--enforce-eager" in checks["CUDA graphs" + v]["live"]
    tp = checks["parallel size" + v]
    assert tp["status"] == "P0" and "it sees 2 (CUDA_VISIBLE_DEVICES=0,1)" in tp["live"]
    assert checks["NCCL_P2P_DISABLE" + v]["status"] == "P0"
    assert checks["NCCL_DEBUG" + v]["status"] == "P2"
    assert checks["memlock" + v]["status"] == "P0"
    assert checks["memlock" + v]["live"].startswith("65536 bytes")
    shm = checks["/dev/shm" + v]
    assert shm["status"] == "P0" and shm["live"].startswith("16 MiB for 8 ranks")
    assert "torch 2.7.0+cu128 for CUDA 12.8" in checks["CUDA build" + v]["live"]

    sglang = rows[("sglang", where, "/models/qwen")]
    s = f": sglang {sglang['pid']} ({where})"
    assert checks["CUDA graphs" + s]["status"] == "P0"
    assert "--disable-cuda-graph" in checks["CUDA graphs" + s]["live"]
    assert checks["CUDA device order" + s]["status"] == "P2"
    assert checks["parallel size" + s]["status"] == "ok"

    bad = rows[("vllm", where, "/models/qwen")]
    assert any(c["name"] == f"read: vllm {bad['pid']} ({where})"
               and "not valid YAML" in c["live"] for c in data["checks"])

    host = rows[("vllm", "host", "/models/small")]
    assert host["metrics"]["requests_running"] == 2.0
    assert host["metrics"]["time_per_output_token_s"] == pytest.approx(0.02)
    assert "TPOT 20.0 ms, running 2" in run.log
    series = (tmp_path / f"audit-{HOST_NAME}.prom").read_text()
    assert f'gpunode_engine_eager{{source="audit",engine="vllm",pid="{vllm["pid"]}",' \
           f'container="{where}"}} 1' in series
    assert "gpunode_engine_time_per_output_token_seconds{" in series

    assert run.change_lines() == []
    assert pids(vm) == before  # every stand-in still runs, as it was started
    assert sh(vm, f"sha1sum {LXC_DIR}/config") == config

    cleanup(vm)
    idle = run_pyinfra("deploy/audit.py", "--dry", "--data", "report=json", "--data",
                       f"report_dir={tmp_path}", timeout=900)
    assert idle.returncode == 0, idle.log[-3000:]
    empty = report(tmp_path)
    assert empty["engines"] == []
    assert any(c["name"] == "engines" and c["live"].startswith("no serving engine running")
               for c in empty["checks"])
    assert "no serving engine running" in idle.log

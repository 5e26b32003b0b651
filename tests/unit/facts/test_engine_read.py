"""The engine read's own shell command, run here against real stand-in processes (a Python
module at the engine's import path that sleeps, started with a real argument vector and
environment), and its parser on the records it can't make here (an environ /proc hides, a
process gone mid-read)."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpunode.facts.engine_read import (
    ARG_BYTES,
    RECORD,
    container_of,
    engine_read_command,
    parse_engine_read,
)

SLEEP = "import os, sys, time\nif '--fork' in sys.argv: os.fork()\ntime.sleep(60)\n"


@pytest.fixture
def stand_ins(tmp_path):
    """Engine modules at their import paths, a venv-like prefix with torch/version.py."""
    for module in ("vllm/entrypoints/openai/api_server", "sglang/launch_server"):
        path = tmp_path / "site" / f"{module}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SLEEP)
        for parent in path.relative_to(tmp_path / "site").parents:
            if str(parent) != ".":
                (tmp_path / "site" / parent / "__init__.py").touch()
    version = tmp_path / "venv/lib/python3.11/site-packages/torch/version.py"
    version.parent.mkdir(parents=True)
    version.write_text("from typing import Optional\n__version__ = '2.7.0+cu128'\n"
                       "cuda: Optional[str] = '12.8'\ngit_version = 'abc'\n")
    (tmp_path / "venv/bin").mkdir()
    started: list[subprocess.Popen] = []

    def start(*args: str, env: dict[str, str] | None = None, argv0: str = sys.executable,
              cwd: Path = tmp_path) -> subprocess.Popen:
        proc = subprocess.Popen([argv0, *args], executable=sys.executable, cwd=cwd,
                                env={"PYTHONPATH": str(tmp_path / "site"), **(env or {})})
        started.append(proc)
        return proc

    yield tmp_path, start
    for proc in started:
        proc.kill()
        proc.wait()


def read(pids: set[int]):
    out = subprocess.run(["sh", "-c", engine_read_command()], capture_output=True, text=True,
                         timeout=60, check=True)
    state = parse_engine_read(out.stdout.splitlines())
    return {p.pid: p for p in state.processes if p.pid in pids}, state


def wait_started(*procs: subprocess.Popen) -> None:
    time.sleep(0.5)
    for proc in procs:
        assert proc.poll() is None


def test_finds_stand_ins_with_argv_env_config_and_torch(stand_ins):
    root, start = stand_ins
    (root / "engine.yaml").write_text("tensor-parallel-size: 4\nenforce-eager: true\n")
    vllm = start("-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--config",
                 "engine.yaml", "--disable-custom-all-reduce",
                 argv0=str(root / "venv/bin/python"),
                 env={"NCCL_P2P_DISABLE": "1", "CUDA_VISIBLE_DEVICES": "1,0"})
    sglang = start("-m", "sglang.launch_server", "--model-path", "m", "--tp", "2",
                   "--disable-cuda-graph", "--fork")
    decoy = start("-c", "import time; time.sleep(60)", "vllm")  # an argument 'vllm' only
    wait_started(vllm, sglang, decoy)
    found, _ = read({vllm.pid, sglang.pid, decoy.pid})
    assert set(found) == {vllm.pid, sglang.pid}

    v = found[vllm.pid]
    assert v.engine == "vllm" and v.where == "host"
    assert v.argv[1:4] == ["-m", "vllm.entrypoints.openai.api_server", "--model"]
    assert v.env is not None and v.env["NCCL_P2P_DISABLE"] == "1"
    assert (v.settings.tensor_parallel, v.settings.eager, v.settings.custom_all_reduce) == (
        4, True, False)
    assert (v.torch_version, v.torch_cuda) == ("2.7.0+cu128", "12.8")
    assert v.cpus_allowed and v.mems_allowed and v.memlock_soft
    assert v.shm_kib and v.shm_kib > 0

    s = found[sglang.pid]
    assert (s.engine, s.settings.tensor_parallel, s.settings.eager) == ("sglang", 2, True)
    assert s.workers == 1  # its forked child, same command line, folded in


def test_huge_command_line_and_malformed_config_are_report_lines(stand_ins):
    root, start = stand_ins
    (root / "bad.yaml").write_text("tensor-parallel-size: [4\n")
    proc = start("-m", "vllm.entrypoints.openai.api_server", "--config", "bad.yaml",
                 "--model", "x" * (ARG_BYTES + 10))
    wait_started(proc)
    found, _ = read({proc.pid})
    notes = found[proc.pid].notes
    assert any("longer than 65536 bytes" in n for n in notes), notes
    assert any(n.startswith("--config bad.yaml: not valid YAML") for n in notes), notes


def test_relative_config_outside_the_root_is_refused(stand_ins):
    root, start = stand_ins
    proc = start("-m", "vllm.entrypoints.openai.api_server", "--config", "../../etc/shadow")
    wait_started(proc)
    found, _ = read({proc.pid})
    assert "--config path has '..': not read" in found[proc.pid].notes


def test_no_engine_running_reads_nothing():
    out = subprocess.run(["sh", "-c", engine_read_command()], capture_output=True, text=True,
                         timeout=60, check=True)
    mine = {os.getpid()}
    assert not [p for p in parse_engine_read(out.stdout.splitlines()).processes
                if p.pid in mine]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_hidden_environ_and_a_process_gone_mid_read():
    argv = b"vllm\0serve\0m\0--enforce-eager\0"
    lines = [f"{RECORD}101", f"cmdline {b64(argv)}", "environ-unreadable",
             "status PPid:\t1", "limits Max locked memory 65536 65536 bytes",
             "cgroup 0::/lxc/110/ns/system.slice/docker-"
             "3f1c2b9a8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a.scope",
             "shm Filesystem 1024-blocks Used Available Capacity Mounted",
             "compat /usr/local/cuda-12.1/compat/libcuda.so.530.30.02",
             f"{RECORD}102", "cmdline ", "environ-unreadable"]
    state = parse_engine_read(lines)
    [p] = state.processes
    assert p.env is None and any("environment not readable" in n for n in p.notes)
    assert (p.vmid, p.docker, p.where) == (110, "3f1c2b9a8d7e", "CT 110, docker 3f1c2b9a8d7e")
    assert p.memlock_soft == "65536" and p.shm_kib is None and p.settings.eager
    assert p.cuda_compat == ["/usr/local/cuda-12.1/compat/libcuda.so.530.30.02"]
    assert state.notes == ["pid 102 exited while it was read"]


@pytest.mark.parametrize("cgroup, want", [
    ("0::/lxc/110/ns/init.scope", (110, None, None)),
    ("0::/lxc/110/ns/system.slice/docker-"
     "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope",
     (110, None, "0123456789ab")),
    ("0::/lxc.payload.gpunode-lab/init.scope", (None, "gpunode-lab", None)),
    ("0::/system.slice/docker-"
     "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210.scope",
     (None, None, "fedcba987654")),
    ("12:memory:/docker/fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210\n"
     "0::/", (None, None, "fedcba987654")),
    ("0::/user.slice/user-0.slice/session-3.scope", (None, None, None)),
])
def test_container_of_cgroup(cgroup, want):
    assert container_of(cgroup) == want


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/unshare").exists(),
                    reason="needs root and unshare (a mount namespace of its own)")
def test_shm_is_the_processs_own_in_its_mount_namespace(stand_ins):
    """An engine in a mount namespace of its own (as in a container) with a 16 MiB /dev/shm:
    the read reports its /dev/shm, not the host's mount at that path (what `df` gave in the
    lab's container)."""
    root, _ = stand_ins
    script = ("mount -t tmpfs -o size=16m tmpfs /dev/shm && exec python3 -m "
              "vllm.entrypoints.openai.api_server --model m")
    proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                            env={**os.environ, "PYTHONPATH": str(root / "site")})
    try:
        time.sleep(1.0)
        assert proc.poll() is None
        found, _ = read({proc.pid})
        assert found[proc.pid].shm_kib == 16 * 1024
    finally:
        proc.kill()
        proc.wait()


CONFIG = '{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096}'


def test_model_directory_config_and_weight_sizes(stand_ins):
    # the model's files through /proc/PID/root: config.json and each shard's size (stat, sparse
    # files here: their contents are never read)
    root, start = stand_ins
    model = root / "models" / "llama"
    model.mkdir(parents=True)
    (model / "config.json").write_text(CONFIG)
    for name, size in (("model-00001-of-00002.safetensors", 4_976_698_672),
                       ("model-00002-of-00002.safetensors", 1_168_138_808)):
        with open(model / name, "wb") as f:
            f.truncate(size)
    (model / "tokenizer.json").write_text("{}")
    proc = start("-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                 "--max-model-len", "8k")
    wait_started(proc)
    found, _ = read({proc.pid})
    p = found[proc.pid]
    assert p.model_dir == str(model)
    assert p.hf_config is not None and p.hf_config["num_hidden_layers"] == 32
    assert (p.weight_bytes, p.weight_files) == (4_976_698_672 + 1_168_138_808, 2)
    assert p.settings.max_model_len == 8000


def test_a_split_gguf_counts_every_shard_or_says_which_are_missing(stand_ins):
    # llama.cpp's gguf-split names; the engine given the first shard's path (vLLM --model FILE)
    root, start = stand_ins
    model = root / "gguf"
    model.mkdir()
    sizes = {"Qwen3-8B-Q8_0-00001-of-00003.gguf": 3_000_000_000,
             "Qwen3-8B-Q8_0-00002-of-00003.gguf": 2_900_000_000,
             "Qwen3-8B-Q8_0-00003-of-00003.gguf": 800_000_000,
             "Qwen3-8B-Q4_K_M.gguf": 5_000_000_000}  # another file in the folder: not counted
    for name, size in sizes.items():
        with open(model / name, "wb") as f:
            f.truncate(size)
    first = model / "Qwen3-8B-Q8_0-00001-of-00003.gguf"
    whole = start("-m", "vllm.entrypoints.openai.api_server", "--model", str(first))
    wait_started(whole)
    p = read({whole.pid})[0][whole.pid]
    assert (p.weight_bytes, p.weight_files) == (6_700_000_000, 3)
    assert not [n for n in p.notes if "split GGUF" in n]
    (model / "Qwen3-8B-Q8_0-00003-of-00003.gguf").unlink()
    p = read({whole.pid})[0][whole.pid]
    assert p.weight_bytes is None  # a part of the model is no figure for it
    assert f"split GGUF {first}: 2 of its 3 shards found beside it" in " ".join(p.notes)


GGUF = Path(__file__).resolve().parents[2] / "data" / "decode" / "ggml-vocab-llama-spm.gguf"
"""A real llama.cpp GGUF file (Llama-2-7B's hyperparameters; tests/data/SOURCES.md)."""


def test_a_gguf_models_header_is_its_config(stand_ins):
    # vLLM --model FILE.gguf: no config.json beside it; the header's first bytes give the shape
    # (llama.cpp's keys as config.json's), a split GGUF's first shard holding them
    root, start = stand_ins
    model = root / "gguf"
    model.mkdir()
    single = model / "llama-2-7b.Q8_0.gguf"
    shutil.copy(GGUF, single)
    first = model / "llama-2-7b-00001-of-00002.gguf"
    shutil.copy(GGUF, first)
    with open(model / "llama-2-7b-00002-of-00002.gguf", "wb") as f:
        f.truncate(6_000_000_000)
    bad = model / "broken.gguf"
    bad.write_bytes(GGUF.read_bytes()[:4] + b"\x03\0\0\0" + bytes(16))
    procs = [start("-m", "vllm.entrypoints.openai.api_server", "--model", str(path))
             for path in (single, first, bad)]
    wait_started(*procs)
    found, _ = read({proc.pid for proc in procs})
    one, split, broken = (found[proc.pid] for proc in procs)
    for p, path in ((one, single), (split, first)):
        assert p.hf_config is not None, p.notes
        assert p.model_config_from == f"GGUF header of {path}"
        assert p.hf_config["architectures"] == ["llama"]
        assert (p.hf_config["num_hidden_layers"], p.hf_config["hidden_size"],
                p.hf_config["vocab_size"]) == (32, 4096, 32000)
    assert (split.weight_bytes, split.weight_files) == (GGUF.stat().st_size + 6_000_000_000, 2)
    assert broken.hf_config is None and broken.model_config_from is None
    assert (f"the model's GGUF header ({bad}): gguf general.architecture: not in the header"
            in broken.notes), broken.notes


def test_hub_id_in_the_processs_hf_cache_and_hf_config_path(stand_ins):
    root, start = stand_ins
    hub = root / "hf" / "hub" / "models--meta-llama--Llama-3.1-8B-Instruct" / "snapshots"
    old, new = hub / "0aaa", hub / "0e9e39f"
    for snap in (old, new):
        snap.mkdir(parents=True)
        (snap / "config.json").write_text(CONFIG)
        time.sleep(0.05)
    with open(new / "model.safetensors", "wb") as f:
        f.truncate(1000)
    other = root / "other"
    other.mkdir()
    (other / "config.json").write_text('{"num_hidden_layers": 80}')
    proc = start("-m", "vllm.entrypoints.openai.api_server", "--model",
                 "meta-llama/Llama-3.1-8B-Instruct", "--hf-config-path", str(other),
                 env={"HF_HOME": str(root / "hf")})
    sglang = start("-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B-Instruct",
                   env={"HF_HUB_CACHE": str(root / "hf" / "hub")})
    wait_started(proc, sglang)
    found, _ = read({proc.pid, sglang.pid})
    v, s = found[proc.pid], found[sglang.pid]
    assert v.model_dir == str(new) and v.weight_bytes == 1000
    assert v.hf_config == {"num_hidden_layers": 80}  # --hf-config-path wins
    assert s.model_dir == str(new) and s.hf_config is not None
    assert s.hf_config["num_hidden_layers"] == 32


def test_model_not_found_or_with_dotdot_is_a_note(stand_ins):
    _, start = stand_ins
    missing = start("-m", "vllm.entrypoints.openai.api_server", "--model", "org/absent",
                    env={"HOME": "/nonexistent"})
    dotdot = start("-m", "sglang.launch_server", "--model-path", "../../etc")
    wait_started(missing, dotdot)
    found, _ = read({missing.pid, dotdot.pid})
    m, d = found[missing.pid], found[dotdot.pid]
    assert (m.model_dir, m.hf_config, m.weight_bytes) == (None, None, None)
    assert any(n.startswith("model 'org/absent': no directory") for n in m.notes), m.notes
    assert "the model path has '..': not read" in d.notes and d.model_dir is None

"""The engine checks on real command lines (tests/data/engines/captured.yaml) placed on the
captured healthy node of tests/unit/audit/_nodes.py (CT 110 with GPU 0, an A100 whose
nvidia-smi reports CUDA 12.2), and the Engines section of the report."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import yaml

from gpunode.facts.engine_read import EngineProcess, EngineReadState
from gpunode.facts.engines import engine_of, parse_settings
from gpunode.facts.gpu_numa import GpuNuma
from gpunode.facts.gpu_topology import parse_gpu_topology
from gpunode.roles.audit.checks import audit_checks
from gpunode.roles.audit.engine_checks import check_engines
from gpunode.roles.audit.engines_report import engine_rows, engine_series
from gpunode.roles.audit.report import render_markdown, render_table, to_json
from tests.unit.audit._nodes import healthy, read

DATA = Path(__file__).resolve().parents[2] / "data" / "engines"
CASES = {c["id"]: c for c in yaml.safe_load((DATA / "captured.yaml").read_text())}


def process(case_id: str, pid: int = 4242, env: dict | None = None, **fields) -> EngineProcess:
    case = CASES[case_id]
    argv = shlex.split(case["command"])
    environment = {**case["env"], **(env or {})}
    settings = parse_settings(argv, environment)
    found = engine_of(argv)
    assert settings is not None and found is not None
    return EngineProcess(pid=pid, engine=found[0],
                         argv=argv, env=environment, settings=settings,
                         **{"memlock_soft": "unlimited", "shm_kib": 16 * 1024 * 1024, **fields})


def node_with(*processes: EngineProcess, **update):
    profile, snap = healthy()
    return profile, snap.model_copy(update={
        "engines": EngineReadState(processes=list(processes)), **update})


def by_name(checks):
    return {c.name: c for c in checks}


def test_eager_tp_and_nccl_leftovers_in_a_container_with_one_gpu():
    # vllm#22303 as run in CT 110 (one GPU), with a debugging leftover
    p = process("vllm-22303-serve-enforce-eager-underscore", vmid=110,
                env={"NCCL_P2P_DISABLE": "1", "NCCL_DEBUG": "INFO"})
    _, snap = node_with(p)
    checks = by_name(check_engines(snap))
    subject = ": vllm 4242 (CT 110)"
    eager = checks["CUDA graphs" + subject]
    assert eager.status == "P0" and "--enforce-eager" in eager.live
    tp = checks["parallel size" + subject]
    assert tp.status == "P0" and "TP 2 x PP 1 = 2 GPUs, it sees 1" in tp.live
    assert "CT 110 is given 1" in tp.live and "--tensor-parallel-size 1" in tp.fix
    assert checks["NCCL_P2P_DISABLE" + subject].status == "P0"
    assert checks["NCCL_DEBUG" + subject].status == "P2"
    assert "unset NCCL_DEBUG" in checks["NCCL_DEBUG" + subject].fix
    order = checks["CUDA device order" + subject]
    assert order.status == "P2" and "CUDA_VISIBLE_DEVICES=1,2" in order.live


def test_clean_engine_on_the_host_is_all_ok():
    # vllm#28910's TP 4 on a host with 4 GPUs, torch for the driver's CUDA
    profile, snap = healthy()
    gpus = snap.nvidia.gpus * 4 if snap.nvidia else []
    p = process("vllm-28910-api-server-module-tp4", torch_version="2.3.1+cu121",
                torch_cuda="12.1", memlock_soft="unlimited")
    _, snap = node_with(p, nvidia=snap.nvidia.model_copy(update={"gpus": gpus}))
    checks = check_engines(snap)
    assert {c.status for c in checks} == {"ok"}, [(c.name, c.status, c.live) for c in checks]


def test_small_shm_low_memlock_and_newer_cuda():
    p = process("vllm-15469-serve-disable-custom-all-reduce", vmid=110, shm_kib=65536,
                memlock_soft="65536", torch_version="2.7.0+cu128", torch_cuda="13.0",
                docker="3f1c2b9a8d7e")
    _, snap = node_with(p)
    checks = by_name(check_engines(snap))
    subject = ": vllm 4242 (CT 110, docker 3f1c2b9a8d7e)"
    shm = checks["/dev/shm" + subject]
    assert shm.status == "P0" and "64 MiB for 2 ranks" in shm.live
    assert "docker run --shm-size" in shm.fix
    memlock = checks["memlock" + subject]
    assert memlock.status == "P0" and "CT 110's init has unlimited" in memlock.live
    cuda = checks["CUDA build" + subject]
    assert cuda.status == "P0" and "driver CUDA 12.2" in cuda.live


def test_sglang_memory_fraction_and_custom_all_reduce_on_pcie():
    topology = parse_gpu_topology(read("nvidia/topo_m_2x5090_phb.txt"), "", "")
    p = process("sglang-1485-tp4-mem-fraction-098")
    profile, snap = healthy()
    gpus = snap.nvidia.gpus * 4 if snap.nvidia else []
    _, snap = node_with(p, topology=topology,
                        nvidia=snap.nvidia.model_copy(update={"gpus": gpus}))
    checks = by_name(check_engines(snap))
    subject = ": sglang 4242 (host)"
    assert checks["--mem-fraction-static" + subject].status == "P2"
    assert checks["custom all-reduce" + subject].status == "P2"
    assert "--disable-custom-all-reduce" in checks["custom all-reduce" + subject].fix
    assert checks["parallel size" + subject].status == "ok"


def test_tgi_one_shard_of_four_visible():
    p = process("tgi-899-num-shard-1-of-4")
    profile, snap = healthy()
    gpus = snap.nvidia.gpus * 4 if snap.nvidia else []
    _, snap = node_with(p, nvidia=snap.nvidia.model_copy(update={"gpus": gpus}))
    tp = by_name(check_engines(snap))["parallel size: tgi 4242 (host)"]
    assert tp.status == "P2" and "--num-shard 4" in tp.fix


def test_affinity_off_the_gpus_numa_node():
    numa = GpuNuma(node_cpus={0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}, gpu_bdf={0: "0000:41:00.0"},
                   bdf_node={"0000:41:00.0": 1})
    p = process("vllm-gfx906-22-serve-tp4", cpus_allowed="0-3", mems_allowed="0-1")
    _, snap = node_with(p, gpu_numa=numa)
    checks = by_name(check_engines(snap))
    subject = ": vllm 4242 (host)"
    assert checks["CPU affinity" + subject].status == "P0"
    assert "numactl --cpunodebind=1" in checks["CPU affinity" + subject].fix
    assert checks["memory affinity" + subject].status == "P2"


def test_unknown_gpus_and_no_torch_are_not_findings():
    profile, snap = healthy()
    p = process("sglang-5389-defaults")
    _, snap = node_with(p, nvidia=None)
    checks = by_name(check_engines(snap))
    assert checks["parallel size: sglang 4242 (host)"].status == "n/a"
    assert checks["CUDA build: sglang 4242 (host)"].status == "n/a"


def test_no_engine_says_so_and_the_report_has_the_section():
    profile, snap = node_with()
    checks = audit_checks(profile, snap)
    [row] = [c for c in checks if c.name == "engines"]
    assert row.status == "n/a" and row.live.startswith("no serving engine running")
    rows = engine_rows(snap, checks)
    assert rows == []
    assert "Engines\n  no serving engine running" in render_table("pve1", checks, rows)
    assert "## Engines\n\nNo serving engine running." in render_markdown("pve1", checks, rows)
    assert to_json("pve1", checks, rows)["engines"] == []
    assert engine_series(rows) == []


def test_report_rows_and_series():
    p = process("vllm-22303-serve-enforce-eager-underscore", vmid=110,
                env={"NCCL_P2P_DISABLE": "1"})
    profile, snap = node_with(p)
    checks = audit_checks(profile, snap)
    rows = engine_rows(snap, checks)
    assert rows is not None and len(rows) == 1
    row = rows[0]
    assert (row["where"], row["cuda_graphs"], row["parallel_mismatch"]) == ("CT 110", False, True)
    assert row["findings"]["P0"] == 3  # eager, TP 2 on 1 GPU, NCCL_P2P_DISABLE
    text = render_table("pve1", checks, rows)
    assert "vllm 4242 (CT 110): model /mnt/general/models/Qwen3-30B-A3B-Instruct-2507-FP8" \
        in text and "CUDA graphs OFF" in text
    assert json.loads(json.dumps(to_json("pve1", checks, rows)))["engines"][0]["pid"] == 4242
    series = "\n".join(engine_series(rows))
    labels = 'source="audit",engine="vllm",pid="4242",container="CT 110"'
    assert f"gpunode_engine_eager{{{labels}}} 1" in series
    assert f"gpunode_engine_parallel_mismatch{{{labels}}} 1" in series
    assert f'gpunode_engine_findings{{{labels},severity="P0"}} 3' in series


def test_stale_cuda_compat_library_on_the_library_path():
    # the captured A100 node's driver is 535.54.03; a CUDA 12.1 image's compat libcuda is older
    lib = "/usr/local/cuda-12.1/compat/libcuda.so.530.30.02"
    p = process("vllm-28910-api-server-module-tp4", vmid=110, cuda_compat=[lib],
                env={"LD_LIBRARY_PATH": "/usr/local/cuda-12.1/compat:/usr/local/nvidia/lib64"})
    _, snap = node_with(p)
    check = by_name(check_engines(snap))["CUDA compat library: vllm 4242 (CT 110)"]
    assert check.status == "P0" and "host driver 535.54.03" in check.live
    off_path = process("vllm-28910-api-server-module-tp4", vmid=110, cuda_compat=[lib])
    _, snap = node_with(off_path)
    assert "CUDA compat library: vllm 4242 (CT 110)" not in by_name(check_engines(snap))

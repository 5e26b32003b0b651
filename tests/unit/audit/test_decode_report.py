"""The decode model's inputs as the audit reads them, on the captured healthy node
(tests/unit/audit/_nodes.py) with real engine command lines (tests/data/engines/captured.yaml)."""

from __future__ import annotations

import pytest

from gpunode.facts.engine_metrics import EngineNumbers
from gpunode.roles.audit.decode_report import decode_inputs, measured_tokens_per_s
from tests.unit.audit.test_engine_checks import node_with, process

CONFIG = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 80}


def test_inputs_read_from_the_node_and_the_engine():
    p = process("vllm-22303-serve-enforce-eager-underscore", model_dir="/m", hf_config=CONFIG,
                weight_bytes=31_000_000_000, weight_files=7)
    _, snap = node_with(p)
    got = decode_inputs(snap, p)
    assert got["gpu_name"] and got["gpu_count"] == len(snap.nvidia.gpus)
    assert (got["tp"], got["pp"], got["eager"], got["context"]) == (2, 1, True, 64000)
    assert got["config"] == CONFIG and got["weights_bytes"] == 31_000_000_000
    assert got["sources"]["context"] == "--max-model-len"
    assert got["sources"]["eager"] == "--enforce-eager"
    assert got["sources"]["weights_bytes"] == "7 weight files in /m"
    assert "model_config" not in got["missing"]


def test_missing_config_and_context_say_so():
    p = process("vllm-15469-serve-disable-custom-all-reduce",
                notes=["model '/x': no directory or file through /proc/PID/root, nor in its "
                       "Hugging Face cache"])
    p = p.model_copy(update={"settings": p.settings.model_copy(update={"max_model_len": None})})
    _, snap = node_with(p)
    got = decode_inputs(snap, p)
    assert got["context"] == 4096 and got["sources"]["context"].startswith("assumed: 4096")
    assert "decode_model_config" in got["missing"]["model_config"]
    assert "no directory" in got["missing"]["model_config"]
    assert got["weights_bytes"] is None and "weights_bytes" in got["missing"]


def test_a_split_gguf_with_shards_missing_names_them_and_gives_no_size():
    note = "split GGUF /m/q-00001-of-00003.gguf: 2 of its 3 shards found beside it (put ..."
    p = process("vllm-22303-serve-enforce-eager-underscore", model_dir="/m/q-00001-of-00003.gguf",
                hf_config=CONFIG, notes=[note])
    _, snap = node_with(p)
    got = decode_inputs(snap, p)
    assert got["weights_bytes"] is None
    assert got["missing"]["weights_bytes"] == note + ": the size is counted from config.json"


def test_measured_tokens_per_second_from_the_mean_time_per_token():
    # vLLM time_per_output_token mean = sum / count (facts.engine_metrics): 20 ms -> 50 tok/s
    numbers = EngineNumbers(url="http://127.0.0.1:8000/metrics", time_per_output_token_s=0.02)
    assert measured_tokens_per_s(numbers) == (50.0, "since engine start")
    assert measured_tokens_per_s(None) == (None, None)
    assert measured_tokens_per_s(EngineNumbers(url="u")) == (None, None)


def test_link_is_the_slowest_pair_and_p2p_every_pair():
    from gpunode.facts.gpu_topology import GpuTopology
    from gpunode.roles.audit.decode_report import engine_link
    p = process("vllm-gfx906-22-serve-tp4")
    topo = GpuTopology(links={"0-1": "PIX", "0-2": "SYS", "1-2": "NODE", "0-3": "PXB"},
                       p2p_read={"0-1": "OK", "0-2": "NS", "1-2": "OK"})
    _, snap = node_with(p, topology=topo)
    assert engine_link(snap, 3) == ("SYS", False)
    assert engine_link(snap, 2) == ("PIX", True)
    assert engine_link(snap, 4) == (None, None)  # pairs not read: not guessed
    assert engine_link(snap, 1) == (None, None)


LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
            "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
            "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16", "head_dim": 128}
"""meta-llama/Llama-3.1-8B-Instruct's config.json (its values; the hub's file)."""


def test_decode_part_on_the_captured_node():
    from gpunode.roles.audit.decode_report import decode_part
    p = process("vllm-22303-serve-enforce-eager-underscore", model_dir="/m",
                hf_config=LLAMA_8B, weight_bytes=16_060_522_496, weight_files=4)
    _, snap = node_with(p)
    numbers = EngineNumbers(url="http://127.0.0.1:8011/metrics", time_per_output_token_s=0.05)
    got = decode_part(snap, p, numbers)
    assert set(got) >= {"ceiling_tokens_per_s", "terms_ms", "binding", "measured_tokens_per_s",
                        "efficiency", "inputs", "missing", "fixes"}
    assert got["measured_tokens_per_s"] == 20.0 and got["window"] == "since engine start"
    if got["ceiling_tokens_per_s"] is not None:
        assert got["efficiency"] == pytest.approx(20.0 / got["ceiling_tokens_per_s"])
        assert got["fixes"] and got["fixes"][0]["fix"].startswith("CUDA graphs on")
    else:
        assert got["missing"]


def test_reports_carry_the_decode_part():
    import json

    from gpunode.roles.audit.checks import audit_checks
    from gpunode.roles.audit.engines_report import engine_rows, engine_series
    from gpunode.roles.audit.report import render_markdown, render_table, to_json
    p = process("sglang-5389-defaults", model_dir="/m", hf_config=LLAMA_8B,
                weight_bytes=16_060_522_496, weight_files=4)
    profile, snap = node_with(p)
    checks = audit_checks(profile, snap)
    numbers = {4242: EngineNumbers(url="http://127.0.0.1:7501/metrics",
                                   time_per_output_token_s=0.01)}
    rows = engine_rows(snap, checks, numbers)
    assert rows is not None
    decode = json.loads(json.dumps(to_json("pve1", checks, rows)))["engines"][0]["decode"]
    assert decode["measured_tokens_per_s"] == 100.0
    assert set(decode["terms_ms"]) == {"weights", "kv", "comm", "launch"}
    assert "Decode (batch 1):" in render_table("pve1", checks, rows)
    assert "### Decode: sglang 4242" in render_markdown("pve1", checks, rows)
    series = "\n".join(engine_series(rows))
    assert ('gpunode_engine_decode_tokens_per_second{source="audit",engine="sglang",'
            'pid="4242",container="host"} 100') in series
    if decode["ceiling_tokens_per_s"] is not None:
        assert "gpunode_engine_decode_efficiency_ratio{" in series


def test_ceiling_efficiency_and_the_eager_fix_on_an_h100():
    # the captured node with its GPU named as an H100 SXM's nvidia-smi prints it: Llama 3.1 8B
    # in bf16 at TP 1, eager; the ceiling from the decode model, the measured 20 ms a token
    from gpunode.roles.audit.decode_report import decode_part
    p = process("vllm-22303-serve-enforce-eager-underscore", model_dir="/m",
                hf_config=LLAMA_8B, weight_bytes=16_060_522_496, weight_files=4)
    p = p.model_copy(update={"settings": p.settings.model_copy(update={"tensor_parallel": 1})})
    _, snap = node_with(p)
    gpus = [snap.nvidia.gpus[0].model_copy(update={"name": "NVIDIA H100 80GB HBM3"})]
    snap = snap.model_copy(update={"nvidia": snap.nvidia.model_copy(update={"gpus": gpus})})
    got = decode_part(snap, p, EngineNumbers(url="u", time_per_output_token_s=0.02))
    assert got["missing"] == [] and got["ceiling_tokens_per_s"] is not None
    assert got["inputs"]["context"] == {"value": 64000, "source": "--max-model-len"}
    assert got["efficiency"] == pytest.approx(50.0 / got["ceiling_tokens_per_s"])
    assert got["terms_ms"]["launch"] > 0 and got["binding"] == "weights"
    fix = got["fixes"][0]
    assert fix["fix"].startswith("CUDA graphs on") and fix["gain"] > 0
    assert "<- binds" in got["bar"]


def test_a_value_the_model_refuses_is_missing_not_a_crash():
    from gpunode.roles.audit.decode_report import decode_part
    p = process("vllm-gfx906-22-serve-tp4", hf_config=LLAMA_8B)
    p = p.model_copy(update={"settings": p.settings.model_copy(update={"tensor_parallel": 0})})
    _, snap = node_with(p)
    got = decode_part(snap, p)
    assert got["ceiling_tokens_per_s"] is None
    assert any(m["input"] == "tp" for m in got["missing"]), got["missing"]


def eight_4090s_without_p2p(tp: int):
    """The captured node as the 8 x RTX 4090 of the all_reduce_perf capture (P2P off: SYS, NS),
    the audit's active mode having run it (tests/data/bandwidth, tests/data/SOURCES.md)."""
    from pathlib import Path

    from gpunode.facts.bandwidth import BandwidthResults, parse_nccl_perf
    from gpunode.facts.gpu_topology import GpuTopology
    capture = Path(__file__).resolve().parents[2] / "data" / "bandwidth"
    perf = parse_nccl_perf((capture / "all_reduce_perf_8x4090_p2p_off.txt").read_text())
    pairs = [f"{a}-{b}" for a in range(8) for b in range(a + 1, 8)]
    topo = GpuTopology(links=dict.fromkeys(pairs, "SYS"), p2p_read=dict.fromkeys(pairs, "NS"))
    p = process("vllm-gfx906-22-serve-tp4", model_dir="/m", hf_config=LLAMA_8B,
                weight_bytes=16_060_522_496, weight_files=4)
    p = p.model_copy(update={"settings": p.settings.model_copy(update={"tensor_parallel": tp})})
    _, snap = node_with(p, topology=topo)
    gpu = snap.nvidia.gpus[0].model_copy(update={"name": "NVIDIA GeForce RTX 4090"})
    snap = snap.model_copy(update={
        "nvidia": snap.nvidia.model_copy(update={"gpus": [gpu] * 8}),
        "bandwidth": BandwidthResults(ran=["all_reduce_perf"], all_reduce=perf)})
    return snap, p


def test_a_measured_all_reduce_is_the_comm_term():
    # Llama 3.1 8B at TP 8: a batch-1 activation is 4,096 x 2 = 8,192 bytes; the capture's
    # 8 KiB row: 44.02 us out-of-place, 42.96 in-place -> 42.96 us; 2 all-reduces a layer x 32
    from gpunode.roles.audit.decode_report import decode_part
    snap, p = eight_4090s_without_p2p(8)
    got = decode_part(snap, p)
    inputs = got["inputs"]
    assert inputs["allreduce_us"]["value"] == 42.96
    assert inputs["allreduce_us"]["source"].startswith(
        "measured: nccl-tests all_reduce_perf at 8192 bytes on 8 GPUs")
    assert got["terms_ms"]["comm"] == pytest.approx(2 * 32 * 42.96 / 1e3)
    fix = next(f for f in got["fixes"] if f["fix"].startswith("P2P on"))
    assert fix["gain"] > 0  # as if fixed: the assumed time with P2P, not the measured without


def test_an_all_reduce_measured_over_other_gpus_is_not_the_engines():
    from gpunode.roles.audit.decode_report import decode_part
    snap, p = eight_4090s_without_p2p(2)
    got = decode_part(snap, p)
    assert got["inputs"]["allreduce_us"]["source"].startswith("assumed: ")

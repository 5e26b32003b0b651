"""The decode model's inputs as the audit reads them, on the captured healthy node
(tests/unit/audit/_nodes.py) with real engine command lines (tests/data/engines/captured.yaml)."""

from __future__ import annotations

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
    assert "shape" not in got["missing"]


def test_missing_config_and_context_say_so():
    p = process("vllm-15469-serve-disable-custom-all-reduce",
                notes=["model '/x': no directory or file through /proc/PID/root, nor in its "
                       "Hugging Face cache"])
    p = p.model_copy(update={"settings": p.settings.model_copy(update={"max_model_len": None})})
    _, snap = node_with(p)
    got = decode_inputs(snap, p)
    assert got["context"] == 4096 and got["sources"]["context"].startswith("assumed: 4096")
    assert "decode.model_config" in got["missing"]["shape"]
    assert "no directory" in got["missing"]["shape"]
    assert got["weights_bytes"] is None and "weights_bytes" in got["missing"]


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

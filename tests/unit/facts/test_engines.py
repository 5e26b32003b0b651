"""Engine arguments parsed as the engines parse them, on real command lines from public
issues (tests/data/engines/captured.yaml; sources in tests/data/SOURCES.md)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from gpunode.facts.engines import engine_of, expert_parallel_size, gpus_per_node, parse_settings

DATA = Path(__file__).resolve().parents[2] / "data" / "engines"
CASES = yaml.safe_load((DATA / "captured.yaml").read_text())
SCRIPTS = {"vllm": "/usr/local/bin/vllm",
           "text-generation-launcher": "/usr/local/bin/text-generation-launcher"}


def as_the_kernel_shows(argv: list[str]) -> list[str]:
    """/proc/PID/cmdline of a command as typed: `python -m` keeps its words (python resolved
    to a path); a console script run through its shebang becomes `python3 /path/script ...`;
    a compiled launcher keeps its path."""
    if argv[0] in ("python", "python3"):
        return ["/usr/bin/python3", *argv[1:]]
    if argv[0] == "vllm":
        return ["/usr/bin/python3", SCRIPTS["vllm"], *argv[1:]]
    return [SCRIPTS.get(argv[0], argv[0]), *argv[1:]]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
@pytest.mark.parametrize("shown", [False, True], ids=["as-typed", "as-in-proc"])
def test_captured_command_lines_parse_as_the_engine_did(case, shown):
    argv = shlex.split(case["command"])
    if shown:
        argv = as_the_kernel_shows(argv)
    want = dict(case["want"])
    engine = want.pop("engine")
    found = engine_of(argv)
    assert found is not None and found[0] == engine
    settings = parse_settings(argv, case["env"])
    assert settings is not None
    got = {key: getattr(settings, key) for key in want}
    assert got == want
    assert settings.problems == []


def test_both_vllm_generations_give_the_same_settings():
    old = parse_settings(shlex.split(
        "python -m vllm.entrypoints.openai.api_server --model M --tensor-parallel-size 4 "
        "--enforce-eager"))
    new = parse_settings(shlex.split("vllm serve M -tp 4 --enforce-eager"))
    assert old is not None and new is not None
    assert (old.model, old.tensor_parallel, old.eager) == (new.model, new.tensor_parallel,
                                                           new.eager) == ("M", 4, True)


def test_not_engines():
    # vllm-project/vllm#7201: the throughput benchmark takes the engine's flags but serves nothing
    bench = shlex.split("python benchmark_throughput.py --model /data/wjc/Qwen/Qwen2-7B-Instruct/ "
                        "--dataset ShareGPT_V3_unfiltered_cleaned_split.json "
                        "--gpu_memory_utilization=0.7 --tensor_parallel_size=2")
    assert engine_of(bench) is None
    assert engine_of(["tail", "-f", "/var/log/vllm"]) is None
    assert engine_of(["/usr/bin/python3", "/usr/local/bin/vllm", "bench", "latency"]) is None
    assert parse_settings(["sleep", "60"]) is None


@pytest.mark.parametrize("args, tp", [
    (["-tp", "2"], 2), (["-tp=2"], 2), (["--tensor-parallel-size=2"], 2),
    (["--tensor_parallel_size", "2"], 2), (["--tensor_parallel_size=2"], 2),
    (["-tp", "2", "--tensor-parallel-size", "4"], 4),  # argparse: the last one wins
])
def test_vllm_flag_spellings(args, tp):
    settings = parse_settings(["vllm", "serve", "m", *args])
    assert settings is not None and settings.tensor_parallel == tp


def test_booleans_and_their_no_form():
    on = parse_settings(["vllm", "serve", "m", "--enforce-eager"])
    off = parse_settings(["vllm", "serve", "m", "--enforce-eager", "--no-enforce-eager"])
    assert on is not None and on.eager and on.source["eager"] == "--enforce-eager"
    assert off is not None and not off.eager


def test_unknown_flags_skip_their_value_and_keep_the_model():
    settings = parse_settings(shlex.split(
        "vllm serve org/model --served-model-name x --max-model-len 4096 --trust-remote-code "
        "--tensor-parallel-size 2"))
    assert settings is not None
    assert (settings.model, settings.tensor_parallel) == ("org/model", 2)


def test_config_file_and_the_command_line_over_it():
    text = "tensor-parallel-size: 4\nenforce_eager: true\ngpu-memory-utilization: 0.8\n"
    settings = parse_settings(["vllm", "serve", "m", "--config", "c.yaml", "-tp", "2"],
                              config_text=text)
    assert settings is not None
    assert settings.tensor_parallel == 2 and settings.source["tensor_parallel"] == "-tp"
    assert settings.eager and settings.source["eager"] == "enforce-eager in config c.yaml"
    assert settings.gpu_memory_fraction == 0.8
    assert settings.config_path == "c.yaml"


@pytest.mark.parametrize("text, problem", [
    ("tensor-parallel-size: [4\n", "not valid YAML"),
    ("- a\n- b\n", "a YAML list, not a mapping"),
    ("tensor-parallel-size: four\n", "'four' is not a number"),
])
def test_malformed_config_is_a_problem_line_not_a_crash(text, problem):
    settings = parse_settings(["vllm", "serve", "m", "--config=bad.yaml"], config_text=text)
    assert settings is not None and settings.tensor_parallel == 1
    assert any(problem in line for line in settings.problems), settings.problems


def test_bad_number_on_the_command_line():
    settings = parse_settings(["vllm", "serve", "m", "-tp", "eight"])
    assert settings is not None and settings.tensor_parallel == 1
    assert settings.problems == ["-tp 'eight' is not a number"]


def test_tgi_reads_variables_in_place_of_flags_and_a_flag_wins():
    by_env = parse_settings(["text-generation-launcher"],
                            {"MODEL_ID": "bigscience/bloom", "NUM_SHARD": "4", "CUDA_GRAPHS": "0"})
    assert by_env is not None
    assert (by_env.model, by_env.tensor_parallel, by_env.eager) == ("bigscience/bloom", 4, True)
    assert by_env.source["tensor_parallel"] == "env NUM_SHARD"
    both = parse_settings(["text-generation-launcher", "--num-shard", "2"], {"NUM_SHARD": "4"})
    assert both is not None and both.tensor_parallel == 2


def test_llama_server_and_trtllm():
    llama = parse_settings(["llama-server", "-m", "/models/q4.gguf", "--port", "9000"],
                           {"LLAMA_ARG_HOST": "0.0.0.0"})
    assert llama is not None and (llama.model, llama.port, llama.host) == (
        "/models/q4.gguf", 9000, "0.0.0.0")
    trt = parse_settings(["trtllm-serve", "serve", "meta/llama", "--tp_size", "2",
                          "--pp_size", "2"])
    assert trt is not None and (trt.model, gpus_per_node(trt)) == ("meta/llama", 4)


def test_gpus_per_node_counts_replicas_and_nodes():
    dp = parse_settings(["vllm", "serve", "m", "-tp", "2", "-dp", "2"])
    two_nodes = parse_settings(["python3", "-m", "sglang.launch_server", "--tp-size", "8",
                                "--nnodes", "2"])
    dp_attention = parse_settings(["python3", "-m", "sglang.launch_server", "--tp", "8",
                                   "--dp", "8", "--enable-dp-attention"])
    assert dp is not None and gpus_per_node(dp) == 4
    assert two_nodes is not None and gpus_per_node(two_nodes) == 4
    assert dp_attention is not None and gpus_per_node(dp_attention) == 8


@pytest.mark.parametrize("raw, want", [
    ("4096", 4096), ("1k", 1000), ("1K", 1024), ("25.6k", 25600), ("32K", 32768),
    ("auto", None), ("-1", None),
])
def test_vllm_max_model_len_reads_human_ints(raw, want):
    # vLLM's human_readable_int (vllm/engine/arg_utils.py): lowercase decimal, uppercase binary
    settings = parse_settings(["vllm", "serve", "m", "--max-model-len", raw])
    assert settings is not None and settings.max_model_len == want and not settings.problems


def test_vllm_decimal_with_a_binary_suffix_is_refused():
    settings = parse_settings(["vllm", "serve", "m", "--max-model-len", "1.5K"])
    assert settings is not None and settings.max_model_len is None
    assert settings.problems == ["--max-model-len '1.5K' is not a number"]


def test_decode_inputs_of_vllm_sglang_and_llama_cpp():
    # JihyunLee1/panic_demo src/run_model_server.sh (the api_server module, --kv-cache-dtype)
    vllm = parse_settings(shlex.split(
        "python -m vllm.entrypoints.openai.api_server --model ./model/checkpoint-5500_merged "
        "--served-model-name pacer --host 0.0.0.0 --port 8001 --dtype float16 "
        "--tensor-parallel-size 2 --max-model-len 512 --kv-cache-dtype fp8"))
    assert vllm is not None
    assert (vllm.dtype, vllm.kv_cache_dtype, vllm.max_model_len, vllm.tensor_parallel) == (
        "float16", "fp8", 512, 2)
    # cornell-sysphotonics/ccl-bench trace_collection/...dp_4_tp_1_ep_4.../run.sh
    ep = parse_settings(shlex.split(
        "vllm serve /pscratch/sd/c/cp724/DeepSeek-V2-Lite --data-parallel-size 4 "
        "--tensor-parallel-size 1 --enable-expert-parallel --port 8000"))
    assert ep is not None and expert_parallel_size(ep) == 4
    q = parse_settings(["vllm", "serve", "m", "-q", "awq", "--hf-config-path", "/cfg"])
    assert q is not None and (q.quantization, q.hf_config_path) == ("awq", "/cfg")
    sg = parse_settings(["python3", "-m", "sglang.launch_server", "--model-path", "m",
                         "--quantization", "fp8", "--ep-size", "8", "--tp", "8"])
    assert sg is not None and sg.quantization == "fp8" and expert_parallel_size(sg) == 8
    llama = parse_settings(["llama-server", "-m", "/models/x-00001-of-00003.gguf", "-c", "8192",
                            "-ctk", "q8_0"])
    assert llama is not None
    assert (llama.model, llama.max_model_len, llama.kv_cache_dtype) == (
        "/models/x-00001-of-00003.gguf", 8192, "q8_0")
    env = parse_settings(["llama-server"], {"LLAMA_ARG_CTX_SIZE": "4096"})
    assert env is not None and env.max_model_len == 4096

"""``python -m gpunode decode``: the step from files; bad or missing input exits 2 with the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpunode.cli import main

DATA = Path(__file__).parents[2] / "data" / "decode"
LLAMA = str(DATA / "llama-3.1-8b.config.json")
H100 = "NVIDIA H100 80GB HBM3"


def test_text_bar_names_the_binding_term(capsys):
    assert main(["decode", "--config", LLAMA, "--gpu", H100]) == 0
    out = capsys.readouterr().out
    assert "ceiling 221.2 tokens/s" in out and "weights" in out and "<- binds" in out


def test_json_is_the_reports_decode_object(capsys):
    """TP 2 over a measured 20 us all-reduce: weights 4.481 / 2 = 2.2405 ms, KV split over
    2 of the 8 KV heads' GPUs 0.0200 ms, comm 2 x 32 x 20 us = 1.28 ms: 282.4 tokens/s."""
    argv = ["decode", "--config", LLAMA, "--gpu", H100, "--gpus", "2", "--tp", "2",
            "--allreduce-us", "20", "--json"]
    assert main(argv) == 0
    got = json.loads(capsys.readouterr().out)
    assert set(got) == {"ceiling_tokens_per_s", "terms_ms", "binding", "measured_tokens_per_s",
                        "efficiency", "inputs", "missing"}
    assert got["terms_ms"]["comm"] == pytest.approx(1.28)
    assert got["ceiling_tokens_per_s"] == pytest.approx(1e3 / (2.2405 + 0.02004 + 1.28), rel=1e-3)
    assert got["binding"] == "weights" and got["missing"] == []
    assert got["inputs"]["allreduce_us"]["source"] == "measured: --allreduce-us"
    assert got["inputs"]["kv_dtype_bytes"]["source"].startswith("assumed:")


def test_weights_bytes_scale_to_the_bytes_stored(capsys):
    """An 8-bit copy: 8.03e9 bytes x read share (7.505 / 8.030) / 3350 GB/s = 2.2405 ms."""
    argv = ["decode", "--config", LLAMA, "--gpu", H100, "--weights-bytes", "8030261248",
            "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["terms_ms"]["weights"] == pytest.approx(
        2.2405, abs=1e-3)


@pytest.mark.parametrize(("argv", "says"), [
    (["--gpu", "NVIDIA Imaginary 9000"], "gpus.yaml"),
    (["--gpu", H100, "--tp", "4", "--gpus", "2"], "TP x PP = 4 is more than the 2 GPUs"),
    (["--gpu", H100, "--tp", "2"], "--allreduce-us X"),
])
def test_missing_input_exits_2_with_how_to_give_it(capsys, argv, says):
    assert main(["decode", "--config", LLAMA, *argv]) == 2
    captured = capsys.readouterr()
    assert says in captured.out and "no decode ceiling" in captured.out


def test_bad_files_exit_2_without_a_traceback(capsys, tmp_path):
    assert main(["decode", "--config", str(tmp_path / "none.json"), "--gpu", H100]) == 2
    assert "cannot read it" in capsys.readouterr().err
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({**json.loads(Path(LLAMA).read_text()), "num_hidden_layers": -1}))
    assert main(["decode", "--config", str(bad), "--gpu", H100]) == 2
    assert "num_hidden_layers" in capsys.readouterr().err
    bad.write_text("[1, 2]")
    assert main(["decode", "--config", str(bad), "--gpu", H100]) == 2
    with pytest.raises(SystemExit) as exit_:
        main(["decode", "--config", LLAMA, "--gpu", H100, "--tp", "-1"])
    assert exit_.value.code == 2
    assert main(["decode", "--config", LLAMA, "--gpu", H100, "--tp", "0"]) == 2
    assert "tp" in capsys.readouterr().err

"""The GGUF header reader on bytes built per the GGUF spec (no real .gguf file is at hand on
this machine: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md), with
Llama-3.1-8B's keys as llama.cpp's converter writes them."""

from __future__ import annotations

import json
import struct

import pytest

from gpunode.cli import main
from gpunode.decode.gguf import parse_gguf_header, shape_from_gguf

UINT32, STRING, ARRAY = 4, 8, 9


def _str(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _kv(key: str, kind: int, value: object) -> bytes:
    head = _str(key) + struct.pack("<I", kind)
    if kind == STRING:
        assert isinstance(value, str)
        return head + _str(value)
    if kind == ARRAY:
        assert isinstance(value, list)
        return head + struct.pack("<IQ", STRING, len(value)) + b"".join(map(_str, value))
    return head + struct.pack("<I", value)


def llama_gguf() -> bytes:
    kvs = [("general.architecture", STRING, "llama"), ("general.file_type", UINT32, 15),
           ("llama.block_count", UINT32, 32), ("llama.embedding_length", UINT32, 4096),
           ("llama.feed_forward_length", UINT32, 14336),
           ("llama.attention.head_count", UINT32, 32),
           ("llama.attention.head_count_kv", UINT32, 8),
           ("tokenizer.ggml.tokens", ARRAY, [f"t{i}" for i in range(128256)])]
    return (b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs))
            + b"".join(_kv(k, t, v) for k, t, v in kvs))


def test_header_scalars_arrays_and_the_shape():
    header = parse_gguf_header(llama_gguf())
    assert (header.version, header.architecture, header.file_type) == (3, "llama", 15)
    assert header.kv["llama.block_count"] == 32 and not header.truncated
    assert header.kv["tokenizer.ggml.tokens"] == {"array": "string", "length": 128256}
    assert shape_from_gguf(header).total_params() == pytest.approx(8.03e9, rel=0.02)


def test_truncated_in_the_token_array_keeps_the_keys_before_it():
    data = llama_gguf()
    header = parse_gguf_header(data[:len(data) // 2])
    assert header.truncated and header.kv["llama.block_count"] == 32
    # the array's type and length are read before its elements: kept (the vocabulary size)
    assert header.kv["tokenizer.ggml.tokens"] == {"array": "string", "length": 128256}


def test_cli_reads_a_gguf_file(tmp_path, capsys):
    path = tmp_path / "model.gguf"
    path.write_bytes(llama_gguf())
    argv = ["decode", "--config", str(path), "--gpu", "NVIDIA H100 80GB HBM3",
            "--weights-bytes", str(4_920_000_000), "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    # 4.92 GB x (7.505 / 8.030 read share) / 3350 GB/s = 1.373 ms.
    assert out["terms_ms"]["weights"] == pytest.approx(1.373, abs=0.002)
    path.write_bytes(llama_gguf()[:200])
    assert main(argv) == 2
    assert "gguf" in capsys.readouterr().err

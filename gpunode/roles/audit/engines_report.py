"""The report's Engines section and the engines' textfile series (pure).

`engine_rows(snap, checks, numbers)` sums up each engine process found (what it runs, where,
its findings by rank and, when read, its own numbers); the report renders the rows as text,
Markdown and JSON; `engine_series` gives the per-engine Prometheus series:

    gpunode_engine_info{engine,pid,container,model}        1 per engine process
    gpunode_engine_findings{engine,pid,container,severity} its open findings (P0, P1, P2)
    gpunode_engine_eager{engine,pid,container}              1 when CUDA graphs are off
    gpunode_engine_parallel_mismatch{engine,pid,container}  1 when TP x PP != its GPUs
    gpunode_engine_time_per_output_token_seconds{...}       the engine's mean (opt-in read)
    gpunode_engine_requests_running{...}                    the engine's own gauge (opt-in)
    gpunode_engine_decode_ceiling_tokens_per_second{...}    the decode model's ceiling
    gpunode_engine_decode_tokens_per_second{...}            measured: 1 / mean TPOT (opt-in)
    gpunode_engine_decode_efficiency_ratio{...}             measured / ceiling
"""

from __future__ import annotations

import textwrap
from typing import Any

from gpunode.facts.engine_metrics import EngineNumbers
from gpunode.profile.check import Check
from gpunode.profile.node import NodeProfile
from gpunode.roles.audit.decode_report import decode_part
from gpunode.roles.audit.engine_checks import engine_subject
from gpunode.roles.audit.snapshot import NodeSnapshot

RANKS = ("P0", "P1", "P2")
SERIES_HELP = {
    "gpunode_engine_info": "a serving engine process found on the node",
    "gpunode_engine_findings": "open gpunode findings of a serving engine, by severity",
    "gpunode_engine_eager": "1 when the engine runs with CUDA graphs off",
    "gpunode_engine_parallel_mismatch": "1 when TP x PP differs from the GPUs it sees",
    "gpunode_engine_time_per_output_token_seconds": "the engine's mean time per output token",
    "gpunode_engine_requests_running": "requests the engine is running",
    "gpunode_engine_decode_ceiling_tokens_per_second":
        "batch-1 decode ceiling of the engine on this node (docs/decode.md)",
    "gpunode_engine_decode_tokens_per_second":
        "the engine's decode speed per stream, 1 / its mean time per output token",
    "gpunode_engine_decode_efficiency_ratio": "measured decode speed / the ceiling",
}
DECODE_SERIES = (("ceiling_tokens_per_s", "gpunode_engine_decode_ceiling_tokens_per_second"),
                 ("measured_tokens_per_s", "gpunode_engine_decode_tokens_per_second"),
                 ("efficiency", "gpunode_engine_decode_efficiency_ratio"))


def engine_rows(snap: NodeSnapshot, checks: list[Check],
                numbers: dict[int, EngineNumbers] | None = None,
                profile: NodeProfile | None = None) -> list[dict[str, Any]] | None:
    """One dict per engine process (None: engines not read)."""
    if snap.engines is None:
        return None
    rows = []
    for p in snap.engines.processes:
        subject = f": {engine_subject(p)}"
        mine = [c for c in checks if c.name.endswith(subject)]
        s = p.settings
        read = (numbers or {}).get(p.pid)
        rows.append({
            "pid": p.pid, "engine": p.engine, "where": p.where, "model": s.model or "",
            "tensor_parallel": s.tensor_parallel, "pipeline_parallel": s.pipeline_parallel,
            "cuda_graphs": not s.eager, "workers": p.workers,
            "shm_mib": None if p.shm_kib is None else p.shm_kib // 1024,
            "memlock": p.memlock_soft, "torch": p.torch_version, "torch_cuda": p.torch_cuda,
            "findings": {rank: sum(c.status == rank for c in mine) for rank in RANKS},
            "parallel_mismatch": any(c.name == "parallel size" + subject and c.status != "ok"
                                     and c.status != "n/a" for c in mine),
            "metrics": None if read is None else read.model_dump(),
            "decode": decode_part(snap, p, read, profile),
        })
    return rows


def _summary(row: dict[str, Any]) -> str:
    f = row["findings"]
    parts = [f"model {row['model'] or '?'}",
             f"TP {row['tensor_parallel']} x PP {row['pipeline_parallel']}",
             "CUDA graphs " + ("on" if row["cuda_graphs"] else "OFF"),
             f"findings P0 {f['P0']}, P1 {f['P1']}, P2 {f['P2']}"]
    metrics = row.get("metrics")
    if metrics and not metrics.get("error"):
        tpot = metrics.get("time_per_output_token_s")
        running = metrics.get("requests_running")
        parts.append("TPOT " + ("?" if tpot is None else f"{tpot * 1000:.1f} ms") +
                     ", running " + ("?" if running is None else f"{running:g}"))
    elif metrics:
        parts.append(f"metrics: {metrics['error']}")
    return "; ".join(parts)


def engines_text(rows: list[dict[str, Any]] | None, width: int = 96) -> list[str]:
    """The terminal report's Engines section (each engine wrapped within width)."""
    if rows is None:
        return []
    lines = ["Engines"]
    if not rows:
        return [*lines, "  no serving engine running", ""]
    for row in rows:
        lines += textwrap.wrap(f"{row['engine']} {row['pid']} ({row['where']}): "
                               f"{_summary(row)}", width, initial_indent="  ",
                               subsequent_indent="      ")
        for line in _decode_lines(row, "    "):
            lines += textwrap.wrap(line, width, subsequent_indent="        ",
                                   drop_whitespace=False) or [line]
    return [*lines, ""]


def _decode_lines(row: dict[str, Any], indent: str) -> list[str]:
    """The engine's Decode block: the step's bar, the measured speed and the fixes."""
    decode = row.get("decode")
    if not decode:
        return []
    lines = [f"{indent}Decode (batch 1):", *(indent + line for line in decode["bar"].split("\n"))]
    if decode.get("measured_tokens_per_s") is not None:
        eff = decode.get("efficiency")
        lines.append(f"{indent}measured {decode['measured_tokens_per_s']:.1f} tokens/s "
                     f"({decode.get('window')})" +
                     ("" if eff is None else f": {eff:.0%} of the ceiling"))
    lines += [f"{indent}if {f['fix']}: {f['ceiling_tokens_per_s']:.1f} tokens/s "
              f"(+{f['gain']:.0%})" for f in decode.get("fixes", [])]
    return lines


def engines_markdown(rows: list[dict[str, Any]] | None) -> list[str]:
    if rows is None:
        return []
    lines = ["", "## Engines", ""]
    if not rows:
        return [*lines, "No serving engine running."]
    lines += ["| Engine | PID | Where | Summary |", "|---|---|---|---|"]
    lines += [f"| {r['engine']} | {r['pid']} | {r['where']} | "
              f"{_summary(r).replace('|', chr(92) + '|')} |" for r in rows]
    for r in rows:
        block = _decode_lines(r, "")
        if block:
            lines += ["", f"### Decode: {r['engine']} {r['pid']}", "", "```", *block[1:], "```"]
    return lines


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(source: str, row: dict[str, Any], **extra: str) -> str:
    pairs = [("source", source), ("engine", row["engine"]), ("pid", str(row["pid"])),
             ("container", row["where"]), *extra.items()]
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in pairs) + "}"


def engine_series(rows: list[dict[str, Any]] | None, source: str = "audit") -> list[str]:
    """The per-engine series in the textfile format (empty: no engine, or not read)."""
    samples: dict[str, list[str]] = {name: [] for name in SERIES_HELP}
    for row in rows or []:
        samples["gpunode_engine_info"].append(
            f"{_labels(source, row, model=row['model'])} 1")
        for rank, n in row["findings"].items():
            samples["gpunode_engine_findings"].append(f"{_labels(source, row, severity=rank)} {n}")
        samples["gpunode_engine_eager"].append(f"{_labels(source, row)} "
                                               f"{0 if row['cuda_graphs'] else 1}")
        samples["gpunode_engine_parallel_mismatch"].append(
            f"{_labels(source, row)} {int(row['parallel_mismatch'])}")
        metrics = row.get("metrics") or {}
        for key, name in (("time_per_output_token_s",
                           "gpunode_engine_time_per_output_token_seconds"),
                          ("requests_running", "gpunode_engine_requests_running")):
            if metrics.get(key) is not None:
                samples[name].append(f"{_labels(source, row)} {metrics[key]:g}")
        decode = row.get("decode") or {}
        for key, name in DECODE_SERIES:
            if decode.get(key) is not None:
                samples[name].append(f"{_labels(source, row)} {decode[key]:g}")
    lines: list[str] = []
    for name, values in samples.items():
        if values:
            lines += [f"# HELP {name} {SERIES_HELP[name]}", f"# TYPE {name} gauge",
                      *(f"{name}{value}" for value in values)]
    return lines

"""Run the pyinfra CLI in-process and count what it sends to the hosts (bench only).

    python bench/pyinfra_counted.py inventories/lab.py deploy/site.py -y

Wraps pyinfra.api.host.Host.run_shell_command (facts and operations both go through it),
Host.put_file (SFTP uploads) and Host.get_fact (which fact ran, how often), and prints one JSON
line to stderr at exit:

    BENCH {"remote_commands": N, "uploads": U, "facts": {"Fact(args)": n, ...},
           "fact_commands": F, "per_host": {...}, "fact_cache": {...}, "wall_s": T,
           "commands_s": C, "slowest": [[seconds, "command..."], ...]}

remote_commands counts every shell command, fact reads included (fact_commands of them);
uploads are separate SFTP transfers; commands_s is the time spent in remote commands and
slowest the 8 longest of them (where a run's time goes). Measurement only: nothing here is
imported by gpunode.

With GPUNODE_BENCH_CAPTURE=PREFIX it also writes the run's first NodeRead (gpunode's one read)
as it went to the host: PREFIX.read.sh, the exact command string the SSH connector sent
(pyinfra's make_unix_command_for_host: the `sh -c '...'` wrapping, sudo if any), and
PREFIX.needs.json, the Needs it was built with (bench/floor.py: needs_record). The bench replays
the first over ssh and derives its floor from the second (run_lab_bench.py, "floor").
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import pyinfra.connectors.ssh as ssh_connector
from pyinfra.api.host import Host

COUNTS: Counter[str] = Counter()
UPLOADS: Counter[str] = Counter()
FACTS: Counter[str] = Counter()
TIMES: list[tuple[float, str]] = []  # each remote command: (seconds, its first 160 characters)
STARTED = time.monotonic()
_run = Host.run_shell_command
_put = Host.put_file
_get_fact = Host.get_fact
_make_unix_command = ssh_connector.make_unix_command_for_host
CAPTURE = os.environ.get("GPUNODE_BENCH_CAPTURE")
_capturing = {"pending": False, "done": False}


def _command_label(args: tuple, kwargs: dict) -> str:
    command = kwargs.get("command", args[0] if args else "")
    text = command.get_raw_value() if hasattr(command, "get_raw_value") else str(command)
    return " ".join(text.split())[:160]


def _counted_run(self, *args, **kwargs):
    COUNTS[self.name] += 1
    started = time.monotonic()
    try:
        return _run(self, *args, **kwargs)
    finally:
        TIMES.append((round(time.monotonic() - started, 3), _command_label(args, kwargs)))


def _counted_put(self, *args, **kwargs):
    UPLOADS[self.name] += 1
    return _put(self, *args, **kwargs)


def _fact_label(fact, kwargs: dict) -> str:
    name = getattr(fact, "__name__", str(fact))
    if not kwargs:
        return name
    # Keep labels short: long list arguments (sysctl keys) are shown by length only.
    parts = []
    for key, value in sorted(kwargs.items()):
        if isinstance(value, (list, tuple)) and len(value) > 2:
            value = f"[{len(value)} items]"
        parts.append(f"{key}={value}")
    return f"{name}({', '.join(parts)})"


def _counted_get_fact(self, fact, *args, **kwargs):
    FACTS[_fact_label(fact, kwargs)] += 1
    capture = (CAPTURE and not _capturing["done"] and getattr(fact, "__name__", "") == "NodeRead"
               and kwargs.get("needs") is not None)
    if not capture:
        return _get_fact(self, fact, *args, **kwargs)
    from floor import needs_record  # bench/floor.py (this script's folder is on sys.path)

    Path(f"{CAPTURE}.needs.json").write_text(json.dumps(needs_record(kwargs["needs"]), indent=1))
    _capturing["pending"] = True
    try:
        return _get_fact(self, fact, *args, **kwargs)
    finally:
        _capturing["pending"], _capturing["done"] = False, True


def _captured_unix_command(*args, **kwargs):
    command = _make_unix_command(*args, **kwargs)
    if _capturing["pending"]:  # one host, one read: the next command sent is the NodeRead
        Path(f"{CAPTURE}.read.sh").write_text(command.get_raw_value())
        _capturing["pending"] = False
    return command


def _report() -> None:
    from pyinfra.context import ctx_state

    cache = getattr(ctx_state.get(), "_gpunode_fact_cache", None) if ctx_state.isset() else None
    payload = {
        "remote_commands": sum(COUNTS.values()),
        "uploads": sum(UPLOADS.values()),
        "fact_commands": sum(FACTS.values()),
        "facts": dict(FACTS.most_common()),
        "per_host": dict(COUNTS),
        "fact_cache": {"hits": cache.hits, "misses": cache.misses} if cache else None,
        "wall_s": round(time.monotonic() - STARTED, 2),
        "commands_s": round(sum(t for t, _ in TIMES), 2),
        "slowest": sorted(TIMES, reverse=True)[:8],
    }
    sys.stderr.write("BENCH " + json.dumps(payload) + "\n")


def main() -> None:
    Host.run_shell_command = _counted_run
    Host.put_file = _counted_put
    Host.get_fact = _counted_get_fact
    ssh_connector.make_unix_command_for_host = _captured_unix_command
    atexit.register(_report)
    from pyinfra_cli.main import main as pyinfra_main

    sys.argv = ["pyinfra", *sys.argv[1:]]
    pyinfra_main()


if __name__ == "__main__":
    main()

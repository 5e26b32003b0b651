"""Run the pyinfra CLI in-process and count the remote commands it sends (bench only).

    python bench/pyinfra_counted.py inventories/lab.py deploy/site.py -y

Wraps pyinfra.api.host.Host.run_shell_command (facts and operations both go through it) and
prints one JSON line to stderr at exit: {"remote_commands": N, "fact_cache": {...}, "wall_s": T}.
Measurement only: nothing here is imported by gpunode itself.
"""

from __future__ import annotations

import atexit
import json
import sys
import time
from collections import Counter

from pyinfra.api.host import Host

COUNTS: Counter[str] = Counter()
STARTED = time.monotonic()
_original = Host.run_shell_command


def _counted(self, *args, **kwargs):
    COUNTS[self.name] += 1
    return _original(self, *args, **kwargs)


def _report() -> None:
    from pyinfra.context import ctx_state

    cache = getattr(ctx_state.get(), "_gpunode_fact_cache", None) if ctx_state.isset() else None
    payload = {
        "remote_commands": sum(COUNTS.values()),
        "per_host": dict(COUNTS),
        "fact_cache": {"hits": cache.hits, "misses": cache.misses} if cache else None,
        "wall_s": round(time.monotonic() - STARTED, 2),
    }
    sys.stderr.write("BENCH " + json.dumps(payload) + "\n")


def main() -> None:
    Host.run_shell_command = _counted
    atexit.register(_report)
    from pyinfra_cli.main import main as pyinfra_main

    sys.argv = ["pyinfra", *sys.argv[1:]]
    pyinfra_main()


if __name__ == "__main__":
    main()

"""Unit-tier settings: a fixed run id (gpunode.pyinfra_adapter.run_id), so the temporary
names in operation fixtures are the same every run (a real run chooses a random one)."""

import os

os.environ.setdefault("GPUNODE_RUN_ID", "test-run")

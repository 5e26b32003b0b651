"""verify_container (the container role's read-back) executed for real on @local: this
machine has no GPU and no NVIDIA driver, so the read-back must report them open (P0), change
nothing, and say so; in change detection it only defers to the run."""

from __future__ import annotations

import logging

from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.operation import add_op
from pyinfra.api.operations import run_ops
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_host, ctx_state

from gpunode.pyinfra_adapter import operation_results
from gpunode.roles.container.ops import verify_container


def test_verify_container_reports_a_machine_without_gpus_and_changes_nothing(caplog):
    state = State(Inventory((["@local"], {})), Config())
    connect_all(state)
    host = state.inventory.get_host("@local")
    caplog.set_level(logging.INFO, logger="pyinfra")
    with ctx_state.use(state), ctx_host.use(host):
        state.set_stage(StateStage.Prepare)
        meta = add_op(state, verify_container, name="Verify the container",
                      expected_gpus=1, host_driver_version="550.127.05",
                      packages=["libnvidia-compute-550"])[host]
        assert meta.will_change is False  # change detection: "verify after the others ran"
        state.set_stage(StateStage.Execute)
        run_ops(state)
    assert operation_results(state, host) == ([], 1, [])
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("@local: ")]
    assert lines[-1].startswith("@local: verified ") and lines[-1].endswith(" open (P0/P1)")
    assert not lines[-1].endswith(" 0 open (P0/P1)")
    assert any(" P0 " in line and "GPUs" in line for line in lines), lines
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any(" P0 " in r.getMessage() for r in warned)

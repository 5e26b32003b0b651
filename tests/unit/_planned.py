"""The operations a deploy added to a real pyinfra State, for tests that read a role's plan."""

from __future__ import annotations

from pyinfra.api import State
from pyinfra.api.host import Host
from pyinfra.context import ctx_host, ctx_state


def planned_commands(state: State, host: Host) -> list[tuple[str, list[str]]]:
    """(operation name without its deploy prefix, its commands) in order, for host."""
    steps = []
    with ctx_state.use(state), ctx_host.use(host):
        for op_hash in state.get_op_order():
            (name,) = state.get_op_meta(op_hash).names
            data = state.get_op_data_for_host(host, op_hash)
            commands = [str(c.get_raw_value()) if hasattr(c, "get_raw_value") else repr(c)
                        for c in data.command_generator()]
            steps.append((name.split(" | ", 1)[1], commands))
    return steps

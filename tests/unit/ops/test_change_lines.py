"""report_change's lines within 100 columns, and the lab's parser reading them back whole."""

from __future__ import annotations

import logging

import pytest
from pyinfra import logger
from pyinfra.api import Config, Inventory, State
from pyinfra.context import ctx_host, ctx_state

from gpunode.ops.changes import report_change, wrapped
from tests.lab.pyinfra_cli import change_lines


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines += [f"    {line}" if i == 0 else line  # pyinfra's CLI indents by 4
                       for i, line in enumerate(record.getMessage().split("\n"))]


@pytest.fixture()
def logged():
    state = State(Inventory((["gpunode-lab"], {})), Config())
    handler = _Lines()
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        with ctx_state.use(state), ctx_host.use(state.inventory.get_host("gpunode-lab")):
            yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


CHANGES = [
    ("kernel.numa_balancing", "1", "0", "runtime; persisted in /etc/sysctl.d/90-gpunode.conf"),
    ("vm.swappiness", "60", "10", "runtime"),
    ("/var/lib/gpunode/state.json", "(absent)",
     "12 sysctls, 0 modules loaded, 0 holds and a longer tail of words", "what undo restores"),
    ("module tcp_bbr", "not loaded", "loaded", None),
]


def test_every_change_line_fits_and_reads_back_whole(logged):
    for setting, old, new, where in CHANGES:
        report_change(setting, old, new, where=where)
    assert logged and max(len(line) for line in logged) <= 100, logged
    assert change_lines("\n".join(logged)) == [
        f"{s} {o} -> {n}" + (f" ({w})" if w else "") for s, o, n, w in CHANGES]


def test_wrapped_messages_fit_and_keep_every_word():
    text = "gpunode-lab: pending reboot (cmdline not active yet: " + "token=value " * 20
    lines = ("    " + wrapped(text)).split("\n")
    assert max(len(line) for line in lines) <= 100 and lines[1].startswith("      ")
    assert " ".join(" ".join(lines).split()) == " ".join(text.split())

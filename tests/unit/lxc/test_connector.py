"""The @pct connector's command wrapping, tested as pure logic (and through a shell)."""

import shutil
import subprocess
from types import SimpleNamespace

import pytest
from pyinfra.api import QuoteString, StringCommand
from pyinfra.api.exceptions import InventoryError
from pyinfra.connectors.util import make_unix_command

from gpunode.roles.lxc_gpu.connector import (
    PctConnector,
    parse_pct_target,
    pct_exec_command,
    pct_pull_command,
    pct_push_command,
)


def test_targets():
    assert parse_pct_target("pve1:110") == ("pve1", 110)
    assert parse_pct_target("10.0.0.2:999999999") == ("10.0.0.2", 999999999)
    assert parse_pct_target("[fd00::2]:110") == ("fd00::2", 110)
    for bad in (None, "pve1", "pve1:", ":110", "pve1:abc", "pve1:99"):
        with pytest.raises(InventoryError):
            parse_pct_target(bad)


def test_names_data():
    assert list(PctConnector.make_names_data("pve1:110")) == [
        ("@pct/pve1:110", {"ssh_hostname": "pve1", "pct_vmid": 110}, ["@pct"])
    ]


def test_exec_wraps_the_command_once():
    raw = pct_exec_command(110, "nvidia-smi -L").get_raw_value()
    assert raw == "pct exec 110 -- sh -c 'nvidia-smi -L'"


def test_push_pull():
    assert pct_push_command(110, "/tmp/a b", "/etc/x").get_raw_value() == (
        "pct push 110 '/tmp/a b' /etc/x"
    )
    assert pct_pull_command(110, "/etc/x", "/tmp/y").get_raw_value() == "pct pull 110 /etc/x /tmp/y"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_quoting_survives_a_real_shell():
    # A fake `pct` that runs what follows `--`, so the quoting is checked by a shell.
    args = ["%s|", "it's", '"q"', "$HOME", "a b"]
    tricky = StringCommand("printf", *(QuoteString(a) for a in args), "&&", "printf", '"$X"')
    inner = make_unix_command(tricky, _env={"X": "1 2"})
    wrapped = pct_exec_command(110, inner).get_raw_value()
    script = 'pct() { shift 2; [ "$1" = "--" ] && shift; "$@"; }\n' + wrapped
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout == 'it\'s|"q"|$HOME|a b|1 2'


class FakeSSH:
    def __init__(self):
        self.calls = []

    def run_shell_command(self, command, **kwargs):
        self.calls.append((command.get_raw_value(), kwargs))
        return True, SimpleNamespace(stdout="status: running", stderr_lines=[])


def _connector(**data):
    connector = PctConnector.__new__(PctConnector)
    connector.host = SimpleNamespace(data={"pct_vmid": 110, **data}, connector_data={})
    connector.state = SimpleNamespace()
    connector.ssh = FakeSSH()
    return connector


def test_run_shell_command_goes_through_pct_exec_on_the_host():
    connector = _connector()
    connector.run_shell_command(StringCommand("id", "-u"), _sudo=True, _timeout=5)
    command, kwargs = connector.ssh.calls[0]
    assert command == "pct exec 110 -- sh -c 'sudo -H -n sh -c '\"'\"'id -u'\"'\"''"
    assert kwargs["_timeout"] == 5 and "_sudo" not in kwargs  # sudo applies inside


def test_pct_sudo_runs_pct_itself_under_sudo():
    connector = _connector(pct_sudo=True)
    connector.run_shell_command(StringCommand("true"))
    assert connector.ssh.calls[0][1]["_sudo"] is True

"""The @pct connector end to end through a real shell: pyinfra's own @local connector stands in
for the SSH connection to the Proxmox host, and a `pct` script on PATH stands in for Proxmox's
(`exec` runs the command, `push`/`pull` copy files, `status` says what PCT_STATUS says). What is
tested is the connector's part: quoting through two shells, the temporary file on the host,
its removal, the refusals."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from pyinfra.api import Config, Inventory, QuoteString, State, StringCommand
from pyinfra.api.exceptions import ConnectError
from pyinfra.connectors.local import LocalConnector

from gpunode.roles.lxc_gpu.connector import PctConnector

FAKE_PCT = """#!/bin/sh
# pct VERB VMID ARGS... (the subset the connector uses)
verb=$1; vmid=$2; shift 2
case $verb in
  status) [ "$vmid" = 110 ] || { echo "no container $vmid" >&2; exit 2; }
          echo "status: ${PCT_STATUS:-running}";;
  exec) shift; exec "$@";;
  push|pull) cp "$1" "$2";;
esac
"""


@pytest.fixture()
def pct(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pct").write_text(FAKE_PCT)
    (bin_dir / "pct").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")
    state = State(Inventory((["@pct/pve:110"], {})), Config())
    host = state.inventory.get_host("@pct/pve:110")
    connector = host.connector
    assert isinstance(connector, PctConnector)
    connector.ssh = LocalConnector(state, host)
    return connector


def test_commands_run_inside_through_pct_exec(pct):
    pct.connect()
    words = [QuoteString(w) for w in ("%s|", "it's", "a b", '"$HOME"')]
    ok, output = pct.run_shell_command(StringCommand("printf", *words))
    assert ok and output.stdout == 'it\'s|a b|"$HOME"|'
    ok, output = pct.run_shell_command(StringCommand("sh", "-c", QuoteString("exit 3")))
    assert not ok


def test_files_go_through_the_host_and_leave_no_temp_file(pct, tmp_path):
    dest = tmp_path / "in container.conf"
    assert pct.put_file(io.StringIO("a = 1\n"), str(dest))
    assert dest.read_text() == "a = 1\n"
    back = io.BytesIO()
    assert pct.get_file(str(dest), back)
    assert back.getvalue() == b"a = 1\n"
    temp = pct.host.get_temp_filename(str(dest))
    assert not Path(temp).exists()


def test_a_failed_pull_is_an_error(pct, tmp_path):
    with pytest.raises(OSError):
        pct.get_file(str(tmp_path / "absent"), io.BytesIO())


def test_a_stopped_or_missing_container_refuses_to_connect(pct, monkeypatch):
    monkeypatch.setenv("PCT_STATUS", "stopped")
    with pytest.raises(ConnectError, match="container 110 is not running"):
        pct.connect()
    pct.host.data.pct_vmid = 111
    with pytest.raises(ConnectError, match="pct status 111 failed"):
        pct.connect()

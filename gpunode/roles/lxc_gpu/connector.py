"""pyinfra connector ``@pct/PROXMOX_HOST:VMID``: run operations inside a Proxmox LXC
container through its host, with no SSH server in the container.

Every command goes over SSH to the Proxmox host as ``pct exec VMID -- sh -c '...'``;
files travel to a temporary file on the host and then ``pct push`` / ``pct pull``.
Arguments like ``_sudo`` and ``_env`` apply inside the container. ``pct`` itself
needs root on the host: connect as root, or set host data ``pct_sudo=True`` to run
it under ``sudo -n``. Shaped after pyinfra's own ``@dockerssh`` connector.

Register it in pyproject.toml::

    [project.entry-points."pyinfra.connectors"]
    pct = "gpunode.roles.lxc_gpu.connector:PctConnector"

then ``pyinfra @pct/pve1:110 deploy/containers.py``; SSH settings (``ssh_user``,
``ssh_key``...) are the Proxmox host's, as for ``@ssh``.
"""

from __future__ import annotations

import os
from tempfile import mkstemp
from typing import TYPE_CHECKING

from pyinfra.api import QuoteString, StringCommand
from pyinfra.api.exceptions import ConnectError, InventoryError
from pyinfra.api.util import get_file_io
from pyinfra.connectors.base import BaseConnector
from pyinfra.connectors.ssh import SSHConnector
from pyinfra.connectors.util import extract_control_arguments, make_unix_command_for_host

if TYPE_CHECKING:
    from pyinfra.api.arguments import ConnectorArguments
    from pyinfra.api.host import Host
    from pyinfra.api.state import State
    from typing_extensions import Unpack

__all__ = [
    "PctConnector",
    "parse_pct_target",
    "pct_exec_command",
    "pct_pull_command",
    "pct_push_command",
    "pct_status_command",
]


def parse_pct_target(name: str | None) -> tuple[str, int]:
    """``"pve1:110"`` -> ("pve1", 110). The host may be a name, an IPv4 address or a
    bracketed IPv6 address (``[fd00::1]:110``)."""
    if not name or ":" not in name:
        raise InventoryError(f"@pct needs PROXMOX_HOST:VMID, e.g. @pct/pve1:110 (got {name!r})")
    host, _, vmid = name.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        raise InventoryError(f"@pct/{name}: the Proxmox host is missing before ':'")
    if not vmid.isdigit() or not 100 <= int(vmid) <= 999_999_999:
        raise InventoryError(
            f"@pct/{name}: {vmid!r} is not a container id (an integer from 100 to 999999999)"
        )
    return host, int(vmid)


def pct_exec_command(vmid: int, command: StringCommand | str) -> StringCommand:
    """``pct exec VMID -- sh -c 'COMMAND'`` (COMMAND quoted once, as a single argument)."""
    return StringCommand("pct", "exec", str(int(vmid)), "--", "sh", "-c", QuoteString(command))


def pct_push_command(vmid: int, host_path: str, container_path: str) -> StringCommand:
    return StringCommand(
        "pct", "push", str(int(vmid)), QuoteString(host_path), QuoteString(container_path)
    )


def pct_pull_command(vmid: int, container_path: str, host_path: str) -> StringCommand:
    return StringCommand(
        "pct", "pull", str(int(vmid)), QuoteString(container_path), QuoteString(host_path)
    )


def pct_status_command(vmid: int) -> StringCommand:
    return StringCommand("pct", "status", str(int(vmid)))


class PctConnector(BaseConnector):
    """Runs commands in a Proxmox LXC container via ``pct exec`` on its host (over SSH)."""

    handles_execution = True

    ssh: SSHConnector

    def __init__(self, state: State, host: Host):
        super().__init__(state, host)
        self.ssh = SSHConnector(state, host)

    @staticmethod
    def make_names_data(name: str | None = None):
        proxmox_host, vmid = parse_pct_target(name)
        yield (
            f"@pct/{name}",
            {"ssh_hostname": proxmox_host, "pct_vmid": vmid},
            ["@pct"],
        )

    @property
    def vmid(self) -> int:
        return int(self.host.data.get("pct_vmid"))

    def _host_arguments(self, arguments: ConnectorArguments) -> ConnectorArguments:
        host_arguments = extract_control_arguments(arguments)
        if self.host.data.get("pct_sudo"):
            host_arguments["_sudo"] = True
        return host_arguments

    def connect(self) -> None:
        self.ssh.connect()
        status, output = self.ssh.run_shell_command(
            pct_status_command(self.vmid), **self._host_arguments({})
        )
        if not status:
            raise ConnectError(
                f"pct status {self.vmid} failed on {self.host.data.get('ssh_hostname')}: "
                + " ".join(output.stderr_lines)
            )
        if "running" not in output.stdout:
            raise ConnectError(
                f"container {self.vmid} is not running ({output.stdout.strip()}); "
                f"start it with `pct start {self.vmid}`"
            )

    def disconnect(self) -> None:
        self.ssh.disconnect()

    def run_shell_command(
        self,
        command,
        print_output: bool = False,
        print_input: bool = False,
        **arguments: Unpack[ConnectorArguments],
    ):
        host_arguments = self._host_arguments(arguments)
        inner = make_unix_command_for_host(self.state, self.host, command, **arguments)
        return self.ssh.run_shell_command(
            pct_exec_command(self.vmid, inner),
            print_output=print_output,
            print_input=print_input,
            **host_arguments,
        )

    def _remove_on_host(self, path: str) -> None:
        self.ssh.run_shell_command(
            StringCommand("rm", "-f", QuoteString(path)), **self._host_arguments({})
        )

    def put_file(
        self,
        filename_or_io,
        remote_filename,
        remote_temp_filename=None,
        print_output: bool = False,
        print_input: bool = False,
        **arguments: Unpack[ConnectorArguments],
    ):
        fd, local_temp = mkstemp()
        host_temp = remote_temp_filename or self.host.get_temp_filename(local_temp)
        try:
            with get_file_io(filename_or_io) as file_io, open(local_temp, "wb") as temp_f:
                data = file_io.read()
                temp_f.write(data.encode() if isinstance(data, str) else data)
            if not self.ssh.put_file(local_temp, host_temp):
                raise OSError(f"could not copy {remote_filename} to the Proxmox host")
            status, output = self.ssh.run_shell_command(
                pct_push_command(self.vmid, host_temp, remote_filename),
                print_output=print_output,
                print_input=print_input,
                **self._host_arguments({}),
            )
        finally:
            os.close(fd)
            os.remove(local_temp)
            self._remove_on_host(host_temp)
        if not status:
            raise OSError(output.stderr)
        return status

    def get_file(
        self,
        remote_filename,
        filename_or_io,
        remote_temp_filename=None,
        print_output: bool = False,
        print_input: bool = False,
        **arguments: Unpack[ConnectorArguments],
    ):
        host_temp = remote_temp_filename or self.host.get_temp_filename(remote_filename)
        try:
            status, output = self.ssh.run_shell_command(
                pct_pull_command(self.vmid, remote_filename, host_temp),
                print_output=print_output,
                print_input=print_input,
                **self._host_arguments({}),
            )
            if not status:
                raise OSError(output.stderr)
            if not self.ssh.get_file(host_temp, filename_or_io):
                raise OSError(f"could not copy {remote_filename} from the Proxmox host")
        finally:
            self._remove_on_host(host_temp)
        return status

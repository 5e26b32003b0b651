"""Commands in the lab guest for the lab tests."""

from __future__ import annotations

from lab.vm import LabVM


def sh(vm: LabVM, command: str, timeout: float = 120) -> str:
    """Run command as root in the guest; its stdout, or the test fails naming the command."""
    rc, out, err = vm.ssh(command, timeout=timeout)
    assert rc == 0, f"{command}: rc={rc}\n{out}\n{err}"
    return out

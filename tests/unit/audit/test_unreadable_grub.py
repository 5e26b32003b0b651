"""The read-only audit on a node whose GRUB value isn't literal words (issue 28.2): it
reports the problem as a finding instead of failing with a traceback; the deploy refuses."""

from __future__ import annotations

from gpunode.roles.audit.checks import check_cmdline
from gpunode.roles.audit.system_checks import grub_default_kernel
from tests.unit.audit._nodes import healthy


def test_audit_reports_an_unkeepable_grub_value():
    profile, snap = healthy()
    text = 'GRUB_DEFAULT="$(pick)"\nGRUB_CMDLINE_LINUX_DEFAULT="quiet $(touch /tmp/x)"\n'
    odd = snap.model_copy(update={"cmdline": snap.cmdline.model_copy(
        update={"grub_default_text": text, "systemd_boot": False})})
    [finding] = check_cmdline(profile, odd)
    assert finding.status == "P1" and "/etc/default/grub line 2" in finding.live
    assert grub_default_kernel(odd) is None

"""More deploy files under `pyinfra --dry @local` in this process (as test_deploys_local.py):
undo on a machine gpunode never touched, and the audit's refusal of bad options."""

from __future__ import annotations

import pytest

from tests.unit.test_deploys_local import _cli_mode, dry_run  # noqa: F401 - the autouse fixture


def test_undo_without_a_record_says_what_it_leaves(tmp_path):
    """No state.json here (test_deploys_local checks the plan): runtime values and holds
    stay as they are, and the log says why."""
    log = dry_run(tmp_path, "deploy/undo.py", {})
    assert "@local: no /var/lib/gpunode/state.json" in log
    assert "runtime values and holds left as they are" in log


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"report": "yaml"}, "@local: --data report"),
        ({"gpunode_audit_active": "sometimes"}, "@local: --data gpunode_audit_active"),
    ],
)
def test_audit_refuses_a_bad_option_before_reading_the_node(tmp_path, data, message):
    log = dry_run(tmp_path, "deploy/audit.py", data, exit_code=1)
    assert message in log

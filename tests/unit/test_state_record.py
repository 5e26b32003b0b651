"""state.json is never trusted blindly (issue 28, item 5): versioned, validated by one schema
on every read, a damaged file is an error naming it and the fix (never "never applied"), and
each run's temporary names are its own."""

from __future__ import annotations

import json

import pytest

from gpunode.facts.owned import STATE_FILE, DamagedStateRecord, RecordedState, parse_state_record
from gpunode.ops.state import damaged_record_message

GOOD = {"version": 1, "recorded": "2026-01-01T00:00:00Z", "sysctls": {"vm.swappiness": "60"},
        "modules_loaded": ["nvidia_uvm"], "holds": ["linux-image-amd64"],
        "boot_unit_enabled": False, "cmdline": ["quiet"], "units_enabled": {"a.service": True}}


def test_a_good_record_reads_back():
    record = parse_state_record(json.dumps(GOOD))
    assert record is not None and record.sysctls == {"vm.swappiness": "60"}
    assert parse_state_record("") is None, "no file: never applied"


DAMAGED = [
    json.dumps(GOOD)[:40],  # truncated (full disk, killed write)
    "null",
    "[]",
    json.dumps({**GOOD, "sysctls": ["vm.swappiness"]}),  # wrong type
    json.dumps({**GOOD, "version": 2}),  # a format this gpunode doesn't know
    json.dumps({**GOOD, "surprise": 1}),
    json.dumps({**GOOD, "sysctls": {"vm.swappiness; reboot": "1"}}),  # tampered
    json.dumps({**GOOD, "sysctls": {"vm.swappiness": "1\nkernel.modprobe=/tmp/x"}}),
    json.dumps({**GOOD, "holds": ["-o APT::x"]}),
    json.dumps({**GOOD, "modules_loaded": ["$(id)"]}),
]


@pytest.mark.parametrize("text", DAMAGED)
def test_a_damaged_record_is_an_error_not_never_applied(text):
    with pytest.raises(DamagedStateRecord):
        parse_state_record(text)
    processed = RecordedState().process(text.splitlines())
    assert isinstance(processed, dict) and "damaged" in processed


def test_the_refusal_names_the_file_and_the_fix():
    message = damaged_record_message("not JSON")
    assert STATE_FILE in message and "Fix:" in message and "not JSON" in message


def test_temporary_names_are_the_runs_own(monkeypatch):
    import gpunode.pyinfra_adapter as adapter
    from gpunode.ops.files import temp_path

    names = set()
    for run in ("1a2b3c4d", "5e6f7a8b"):
        monkeypatch.setattr(adapter, "_NO_STATE_RUN", {"id": run})
        names.add(temp_path(STATE_FILE))
    assert len(names) == 2 and all(name.startswith(STATE_FILE + ".") for name in names)

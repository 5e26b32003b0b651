"""Proxmox container config parser/writer: byte-exact round trips on real files,
edits that land in the main section only, idempotence."""

import pytest

from gpunode.facts import pve_config as pc
from tests.unit.lxc._data import ALL_CONFIGS, REAL_CONFIGS, read


def _tail_from_first_section(text: str) -> str:
    """Everything from the first [section] header on (snapshots, pending)."""
    index = text.find("\n[")
    return text[index:] if index >= 0 else ""


@pytest.mark.parametrize("name", ALL_CONFIGS)
def test_round_trip_is_byte_exact(name):
    text = read(name)
    assert pc.render(pc.parse_pve_lxc_config(text)) == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n",
        "arch: amd64",
        "arch: amd64\n\n\n",
        "  \t\narch: amd64\r\nmemory: 512\r\n",
        "lxc.cgroup2.devices.allow = c 195:* rwm\nlxc.cap.drop:\n",
        "#desc%20with%3A colon\n[snap]\n\n[pve:pending]\ndelete: swap\n",
        "garbage line without colon\n???\n[Snap_1]\narch: amd64",
    ],
)
def test_round_trip_edge_cases(text):
    assert pc.render(pc.parse_pve_lxc_config(text)) == text


def test_sections_and_reading_real_file_with_snapshot():
    config = pc.parse_pve_lxc_config(read("pve-container-rollback-105.conf"))
    assert [s.name for s in config.sections] == ["", "test"]
    assert pc.snapshot_names(config) == ["test"]
    assert config.main.lines[0].kind == "comment"
    assert pc.get(config, "memory") == "2048"  # main section, not the snapshot's 4096
    assert pc.get(config, "snaptime") is None
    assert pc.main_options(config)["unused0"] == "preserved:some-disk-1"
    assert pc.pending_options(config) == {}


def test_repeated_lxc_keys_and_empty_values_are_kept_in_order():
    config = pc.parse_pve_lxc_config(read("frigate-7640-102.conf"))
    allows = pc.get_all(config, "lxc.cgroup2.devices.allow")
    assert allows == ["c 226:0 rwm", "c 226:128 rwm", "a"]
    assert ("lxc.cap.drop", "") in pc.lxc_entries(config)


def test_pending_section_is_its_own_section():
    config = pc.parse_pve_lxc_config(read("composed-gpu-pending-snapshots-110.conf"))
    assert [s.name for s in config.sections] == ["", "pve:pending", "before-driver"]
    assert pc.pending_options(config) == {"memory": "98304"}
    assert pc.snapshot_names(config) == ["before-driver"]
    assert pc.get(config, "memory") == "65536"


def test_description_comments_are_not_options():
    config = pc.parse_pve_lxc_config(read("helper-scripts-frigate-100.conf"))
    assert pc.main_options(config)["hostname"] == "frigate"
    assert sum(1 for ln in config.main.lines if ln.kind == "comment") == 6


# --- edits -------------------------------------------------------------------


@pytest.mark.parametrize("name", REAL_CONFIGS + ["composed-gpu-pending-snapshots-110.conf"])
def test_new_key_lands_in_main_section_and_snapshots_stay_identical(name):
    text = read(name)
    edited = pc.render(pc.with_key(pc.parse_pve_lxc_config(text), "cpulimit", "4"))
    reparsed = pc.parse_pve_lxc_config(edited)
    assert pc.get(reparsed, "cpulimit") == "4"
    assert _tail_from_first_section(edited) == _tail_from_first_section(text)
    for section in reparsed.sections[1:]:
        assert all(ln.key != "cpulimit" or ln.value != "4" for ln in section.lines)


def test_new_option_goes_where_proxmox_sorts_it_before_the_lxc_block():
    config = pc.parse_pve_lxc_config(read("frigate-7640-102.conf"))
    edited = pc.render(pc.with_key(config, "cpulimit", "4"))
    lines = edited.splitlines()
    assert lines.index("cpulimit: 4") == lines.index("cores: 2") + 1
    assert lines.index("cpulimit: 4") < lines.index("features: keyctl=1,nesting=1")


def test_option_after_all_others_goes_before_first_lxc_line():
    config = pc.parse_pve_lxc_config(read("frigate-7640-102.conf"))
    lines = pc.render(pc.with_key(config, "zzz", "1")).splitlines()
    assert lines[lines.index("zzz: 1") + 1].startswith("lxc.")


def test_replace_keeps_position_and_is_idempotent():
    text = read("pve-container-rollback-105.conf")
    config = pc.parse_pve_lxc_config(text)
    once = pc.with_key(config, "memory", "8192")
    twice = pc.with_key(once, "memory", "8192")
    assert pc.render(once) == pc.render(twice)
    assert pc.render(once) == text.replace("memory: 2048", "memory: 8192", 1)
    # The snapshot's memory is untouched.
    assert "memory: 4096" in pc.render(once)


def test_unchanged_value_returns_the_same_object():
    config = pc.parse_pve_lxc_config(read("pve-container-delete-106.conf"))
    assert pc.with_key(config, "memory", "2048") is config


def test_without_key_only_touches_main_section():
    text = read("pve-container-rollback-105.conf")
    edited = pc.render(pc.without_key(pc.parse_pve_lxc_config(text), "cpulimit"))
    assert "cpulimit: 1" not in edited
    assert "cpulimit: 2" in edited  # the snapshot keeps its own


def test_no_trailing_newline_file_stays_that_way_and_edit_goes_before_snapshot():
    text = read("pupman-idmap-snapshot-100.conf")
    assert not text.endswith("\n")
    config = pc.parse_pve_lxc_config(text)
    edited = pc.render(pc.with_lxc_entry(config, "lxc.prlimit.memlock", "unlimited"))
    assert not edited.endswith("\n")
    main, _, snapshot = edited.partition("\n\n[pre-setup]\n")
    assert main.endswith("lxc.idmap: g 0 6653600 65536\nlxc.prlimit.memlock: unlimited")
    assert "memlock" not in snapshot


def test_insert_into_single_section_file_without_final_newline():
    config = pc.parse_pve_lxc_config("arch: amd64")
    assert pc.render(pc.with_key(config, "memory", "512")) == "arch: amd64\nmemory: 512"


def test_insert_into_empty_file():
    assert pc.render(pc.with_key(pc.parse_pve_lxc_config(""), "arch", "amd64")) == ("arch: amd64\n")


def test_with_lxc_entry_appends_repeating_keys_once():
    config = pc.parse_pve_lxc_config(read("frigate-7640-102.conf"))
    once = pc.with_lxc_entry(config, "lxc.cgroup2.devices.allow", "c 10:200 rwm")
    twice = pc.with_lxc_entry(once, "lxc.cgroup2.devices.allow", "c 10:200 rwm")
    assert pc.render(once) == pc.render(twice)
    assert pc.get_all(once, "lxc.cgroup2.devices.allow")[-1] == "c 10:200 rwm"
    # Already present: nothing changes.
    assert pc.with_lxc_entry(config, "lxc.cgroup2.devices.allow", "a") is config


def test_with_lxc_entry_replaces_single_valued_keys():
    config = pc.parse_pve_lxc_config(read("frigate-7640-102.conf"))
    edited = pc.with_lxc_entry(config, "lxc.apparmor.profile", "generated")
    assert pc.get_all(edited, "lxc.apparmor.profile") == ["generated"]


def test_equals_form_is_parsed_and_rewritten_in_colon_form():
    config = pc.parse_pve_lxc_config("arch: amd64\nlxc.apparmor.profile = unconfined\n")
    assert pc.get(config, "lxc.apparmor.profile") == "unconfined"
    edited = pc.render(pc.with_key(config, "lxc.apparmor.profile", "generated"))
    assert edited == "arch: amd64\nlxc.apparmor.profile: generated\n"


def test_with_lxc_entry_rejects_non_lxc_keys():
    with pytest.raises(ValueError):
        pc.with_lxc_entry(pc.parse_pve_lxc_config(""), "memory", "1")

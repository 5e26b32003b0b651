"""YAML profiles and host data that mean something else (issue 28, item 6): duplicate keys,
YAML 1.1 numbers and booleans, the alias bomb, typos with "did you mean", --limit."""

from __future__ import annotations

import time

import pytest

from gpunode.profile.loader import ProfileError, load_profile, load_yaml_profile, profiles_of_run


def _profile_file(tmp_path, text: str):
    path = tmp_path / "profile.yml"
    path.write_text(text, encoding="utf-8")
    return path


def test_duplicate_key_refused_naming_key_and_line(tmp_path):
    path = _profile_file(tmp_path, "sysctls:\n  vm.swappiness: 10\nreboot: false\n"
                                   "sysctls:\n  vm.dirty_ratio: 5\n")
    with pytest.raises(ProfileError) as err:
        load_profile("gpu-07", {"gpunode_profile_file": str(path)})
    text = str(err.value)
    assert "gpu-07" in text and "'sysctls'" in text and "line 4" in text and str(path) in text


def test_duplicate_nested_key_refused(tmp_path):
    path = _profile_file(tmp_path, "sysctls:\n  vm.swappiness: 10\n  vm.swappiness: 1\n")
    with pytest.raises(ProfileError, match=r"'vm.swappiness'.*line 3"):
        load_profile("gpu-07", {"gpunode_profile_file": str(path)})


@pytest.mark.parametrize("plain", ["010", "0o17", "1:30", "1_000", "yes", "No", "on", "OFF"])
def test_yaml_1_1_only_forms_refused(tmp_path, plain):
    path = _profile_file(tmp_path, f"sysctls:\n  vm.swappiness: {plain}\n")
    with pytest.raises(ProfileError) as err:
        load_profile("gpu-07", {"gpunode_profile_file": str(path)})
    text = str(err.value)
    assert "gpu-07" in text and repr(plain) in text and "line 2" in text and "quote" in text


def test_quoted_and_plain_forms_keep_their_meaning(tmp_path):
    path = _profile_file(tmp_path, "sysctls:\n  vm.swappiness: '010'\n  vm.dirty_ratio: 10\n"
                                   "reboot: true\nverify_timer: false\nmax_cstate: 0x1\n")
    data = load_yaml_profile(path)
    assert data["sysctls"] == {"vm.swappiness": "010", "vm.dirty_ratio": 10}
    assert data["reboot"] is True and data["verify_timer"] is False and data["max_cstate"] == 1


def test_alias_bomb_refused_fast(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]")
    path = _profile_file(tmp_path, "\n".join(lines) + "\n")
    start = time.monotonic()
    with pytest.raises(ProfileError, match="alias"):
        load_profile("gpu-07", {"gpunode_profile_file": str(path)})
    assert time.monotonic() - start < 2


def test_unknown_profile_key_gets_did_you_mean():
    with pytest.raises(ProfileError) as err:
        load_profile("gpu-07", {"gpunode": {"sysctl": {"vm.swappiness": 1}}})
    assert "did you mean 'sysctls'" in str(err.value)
    with pytest.raises(ProfileError) as err:
        load_profile("gpu-07", {"gpunode": {"pcie_selector": {"vendr": "10de"}}})
    assert "gpunode.pcie_selector.vendr" in str(err.value)
    assert "did you mean 'vendor'" in str(err.value)


def test_unknown_gpunode_data_key_refused_with_did_you_mean():
    with pytest.raises(ProfileError) as err:
        load_profile("gpu-07", {"gpunode_profle_file": "x.yml"})
    text = str(err.value)
    assert "gpu-07: gpunode_profle_file" in text and "did you mean 'gpunode_profile_file'" in text


def test_validation_covers_only_hosts_in_limit():
    """A real pyinfra State with --limit's initial_limit: the bad host outside it is not
    validated; without the limit it stops the run."""
    from pyinfra.api import Config, Inventory, State
    from pyinfra.context import ctx_state

    inventory = Inventory(([("gpu-01", {}), ("gpu-02", {"gpunode": {"reboot": "maybe"}})], {}))
    limited = State(inventory, Config(), initial_limit=[inventory.get_host("gpu-01")])
    with ctx_state.use(limited):
        assert set(profiles_of_run(limited)) == {"gpu-01"}
    whole = State(inventory, Config())
    with ctx_state.use(whole), pytest.raises(ProfileError, match="gpu-02"):
        profiles_of_run(whole)


def test_every_gpunode_data_key_the_code_reads_is_known():
    """A `gpunode_*` host data key read anywhere in gpunode/ (host.data.get("gpunode_...") or
    a *_DATA_KEY constant) is one the loader knows: a new option is never refused as a typo."""
    import re
    from pathlib import Path

    from gpunode.profile.loader import KNOWN_DATA_KEYS

    package = Path(__file__).resolve().parents[2] / "gpunode"
    read = set()
    for source in package.rglob("*.py"):
        text = source.read_text()
        read |= set(re.findall(r"data\.get\(\s*\"(gpunode_[a-z_]+)\"", text))
        read |= set(re.findall(r"^[A-Z_]*DATA[A-Z_]* = \"(gpunode_[a-z_]+)\"", text, re.M))
    assert {"gpunode_audit_engine_metrics", "gpunode_container"} <= read  # the search finds
    assert read <= KNOWN_DATA_KEYS, sorted(read - KNOWN_DATA_KEYS)

"""cpuidle / cpufreq parsers on captured sysfs reads."""

import subprocess
from pathlib import Path

from gpunode.facts.cpu import CPU_COMMAND, CPU_SYSFS, parse_cpu_sections, parse_idle_states
from gpunode.ops.cpu import cpu_cmdline_params, cpus_by_state, states_to_disable
from tests.unit._sections import sections_text

DATA = Path(__file__).parents[1] / "data" / "cpuidle"


def test_intel_icelake_states_and_cap():
    states = parse_idle_states((DATA / "intel-icelake-tuned-808.txt").read_text())
    assert [(s.name, s.depth, s.latency_us) for s in states] == [
        ("POLL", 0, 0), ("C1", 1, 1), ("C1E", 1, 4), ("C6", 6, 170)]
    assert [s.name for s in states_to_disable(states, 1)] == ["C6"]
    assert states_to_disable(states, 6) == []
    assert [s.name for s in states_to_disable(states, 0)] == ["C1", "C1E", "C6"]


def test_kvm_guest_haltpoll_state_counts_as_c1():
    states = parse_idle_states((DATA / "kvm-guest-haltpoll.txt").read_text())
    assert [(s.cpu, s.name, s.depth) for s in states] == [
        (0, "POLL", 0), (0, "haltpoll idle", 1), (1, "POLL", 0), (1, "haltpoll idle", 1)]
    assert states_to_disable(states, 1) == []


def test_already_disabled_states_are_left_alone():
    text = (DATA / "intel-icelake-tuned-808.txt").read_text().replace(
        "state3/disable:0", "state3/disable:1")
    assert states_to_disable(parse_idle_states(text), 1) == []


def test_group_by_state_index():
    text = "\n".join(
        f"/sys/devices/system/cpu/cpu{c}/cpuidle/state2/{f}:{v}"
        for c in (0, 1, 2) for f, v in (("name", "C2"), ("latency", "100"), ("disable", "0")))
    assert cpus_by_state(parse_idle_states(text)) == {2: [0, 1, 2]}


def test_cpu_sections_amd_host():
    state = parse_cpu_sections(sections_text(
        vendor="vendor_id\t: AuthenticAMD",
        idle_driver="acpi_idle",
        cpufreq_driver="acpi-cpufreq",
        governors="/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor schedutil\n"
                  "/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor performance",
        available_governors="conservative ondemand userspace powersave performance schedutil",
        max_cstate="processor.max_cstate 9",
    ))
    assert state.is_amd and not state.is_intel
    assert state.governors == {0: "schedutil", 1: "performance"}
    assert state.max_cstate_params == {"processor.max_cstate": "9"}
    assert cpu_cmdline_params(state, 1, "active") == {
        "processor.max_cstate": "1", "amd_pstate": "active"}


def test_cpu_sections_empty_node():
    state = parse_cpu_sections("")
    assert state.vendor is None and state.idle_states == [] and state.governors == {}
    assert cpu_cmdline_params(state, 1, "active") == {
        "processor.max_cstate": "1", "intel_idle.max_cstate": "1"}
    assert cpu_cmdline_params(state, 0, None) == {"idle": "poll"}


def test_governors_and_cstate_caps_are_read_without_a_process_a_cpu(tmp_path):
    """CPU_COMMAND in the real shell over a scratch sysfs: every CPU's governor and the
    C-state caps come from shell builtins (read), not a cat per file."""
    cpus, modules = tmp_path / "cpu", tmp_path / "module"
    for n, governor in enumerate(["performance", "schedutil", "performance"]):
        (cpus / f"cpu{n}" / "cpufreq").mkdir(parents=True)
        (cpus / f"cpu{n}" / "cpufreq" / "scaling_governor").write_text(governor + "\n")
    (modules / "processor" / "parameters").mkdir(parents=True)
    (modules / "processor" / "parameters" / "max_cstate").write_text("1\n")
    command = CPU_COMMAND.replace(CPU_SYSFS, str(cpus)).replace("/sys/module", str(modules))
    assert "$(cat" not in command
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True).stdout
    state = parse_cpu_sections(out)
    assert state.governors == {0: "performance", 1: "schedutil", 2: "performance"}
    assert state.max_cstate_params == {"processor.max_cstate": "1"}


def test_vendor_and_idle_states_are_read_without_a_process(tmp_path):
    """The vendor line and every cpuidle file come from builtins, in grep's own output: the
    first vendor_id line of /proc/cpuinfo as is, and PATH:VALUE for each non-empty file."""
    cpus = tmp_path / "cpu"
    for n in range(2):
        for s, (name, latency) in enumerate([("POLL", "0"), ("C1", "1")]):
            state = cpus / f"cpu{n}" / "cpuidle" / f"state{s}"
            state.mkdir(parents=True)
            (state / "name").write_text(name + "\n")
            (state / "latency").write_text(latency + "\n")
            (state / "disable").write_text("0")  # no newline: still read
    command = CPU_COMMAND.replace(CPU_SYSFS, str(cpus))
    assert "grep" not in command
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True).stdout
    grep = subprocess.run(["grep", "-m1", "vendor_id", "/proc/cpuinfo"], capture_output=True,
                          text=True).stdout
    assert grep and grep in out  # x86: byte for byte as grep printed it
    states = parse_cpu_sections(out).idle_states
    assert [(s.cpu, s.name, s.latency_us, s.disabled) for s in states] == [
        (0, "POLL", 0, False), (0, "C1", 1, False), (1, "POLL", 0, False), (1, "C1", 1, False)]

"""pveversion and proxmox-boot-tool parsers on real captures (tests/data/proxmox)."""

import pytest

from gpunode.facts.proxmox import (
    BOOT_TOOL_SECTION_MARKER,
    ProxmoxBootTool,
    PveVersionFact,
    esp_problem_message,
    parse_proxmox_boot_tool,
    parse_proxmox_boot_tool_status,
    parse_proxmox_kernel_list,
    parse_pveversion,
)

from ._data import read


@pytest.mark.parametrize(
    ("relative", "manager", "kernel"),
    [
        ("proxmox/pveversion_8.0.3.txt", "8.0.3", "6.2.16-3-pve"),
        ("proxmox/pveversion_7.4-3.txt", "7.4-3", "5.15.102-1-pve"),
        ("proxmox/pveversion_7.4-20.txt", "7.4-20", "5.15.158-2-pve"),
        ("proxmox/pveversion_v_8.3.2.txt", "8.3.2", "6.8.12-5-pve"),
    ],
)
def test_pveversion(relative, manager, kernel):
    version = parse_pveversion(read(relative))
    assert version.present
    assert version.manager_version == manager
    assert version.running_kernel == kernel


@pytest.mark.parametrize("text", ["", "\n", "bash: pveversion: command not found"])
def test_pveversion_absent(text):
    version = parse_pveversion(text)
    assert not version.present
    assert version.manager_version is None and version.running_kernel is None


def test_status_systemd_boot_two_esps_and_stale_uuid():
    status = parse_proxmox_boot_tool_status(read("proxmox/boot_tool_status_uefi_2esp_stale.txt"))
    assert status.present
    assert status.mode == "systemd-boot"
    assert status.esps == ["6D31-87F4", "CE07-78FC"]  # the WARN'd CE07-1118 is not an ESP
    assert status.managed
    assert status.booted_uefi is True
    assert status.kernels_on_esps == ["5.13.19-6-pve", "5.15.39-3-pve", "5.15.83-1-pve"]


def test_status_systemd_boot_one_esp():
    status = parse_proxmox_boot_tool_status(read("proxmox/boot_tool_status_uefi_1esp.txt"))
    assert (status.mode, status.esps, status.managed) == ("systemd-boot", ["E014-501F"], True)


def test_status_managed_grub_on_legacy_bios():
    status = parse_proxmox_boot_tool_status(read("proxmox/boot_tool_status_grub_legacy.txt"))
    assert status.mode == "grub"
    assert status.esps == ["865E-6ADE"]
    assert status.managed
    assert status.booted_uefi is False
    assert status.kernels_on_esps == ["6.8.12-4-pve", "6.8.12-8-pve"]


def test_status_not_configured_means_plain_grub():
    status = parse_proxmox_boot_tool_status(read("proxmox/boot_tool_status_not_configured.txt"))
    assert status.present
    assert status.mode == "grub"
    assert status.esps == []
    assert not status.managed
    assert status.booted_uefi is None


def test_status_absent_and_unknown():
    assert parse_proxmox_boot_tool_status("").present is False
    assert parse_proxmox_boot_tool_status("").mode is None
    odd = parse_proxmox_boot_tool_status("Re-executing '/usr/sbin/proxmox-boot-tool' ...\n")
    assert (odd.present, odd.mode) == (True, "unknown")


@pytest.mark.parametrize(
    ("relative", "kernels", "pinned"),
    [
        (
            "proxmox/boot_tool_kernel_list_pinned_3kernels.txt",
            ["6.11.11-2-pve", "6.14.8-2-pve", "6.5.13-6-pve"],
            "6.5.13-6-pve",
        ),
        ("proxmox/boot_tool_kernel_list_pinned_1kernel.txt", ["6.8.4-2-pve"], "6.8.4-2-pve"),
        ("proxmox/boot_tool_kernel_list_unpinned.txt", ["6.8.12-4-pve"], None),
    ],
)
def test_kernel_list(relative, kernels, pinned):
    assert parse_proxmox_kernel_list(read(relative)) == (kernels, pinned)


def test_kernel_list_empty():
    assert parse_proxmox_kernel_list("") == ([], None)


def test_kernel_list_manual_and_next_boot_sections():
    # Section headers exactly as proxmox-boot-tool's list_kernels() echoes them
    # (proxmox-kernel-helper, src/bin/proxmox-boot-tool); the versions are this test's own.
    text = (
        "Manually selected kernels:\n6.5.13-6-pve\n\n"
        "Automatically selected kernels:\n6.8.12-4-pve\n6.5.13-6-pve\n\n"
        "Pinned kernel:\n6.8.12-4-pve\n\n"
        "Kernel pinned on next-boot:\n6.5.13-6-pve\n"
    )
    assert parse_proxmox_kernel_list(text) == (["6.5.13-6-pve", "6.8.12-4-pve"], "6.8.12-4-pve")
    info = parse_proxmox_boot_tool(
        read("proxmox/boot_tool_status_uefi_1esp.txt") + BOOT_TOOL_SECTION_MARKER + "\n" + text
    )
    assert info.next_boot == "6.5.13-6-pve"


def test_combined_fact_output():
    output = (
        read("proxmox/boot_tool_status_grub_legacy.txt")
        + BOOT_TOOL_SECTION_MARKER
        + "\n"
        + read("proxmox/boot_tool_kernel_list_pinned_1kernel.txt")
    )
    info = ProxmoxBootTool().process(output.splitlines())
    assert info.status.mode == "grub"
    assert info.status.esps == ["865E-6ADE"]
    assert info.kernels == ["6.8.4-2-pve"]
    assert info.pinned == "6.8.4-2-pve"
    assert info.next_boot is None


def test_facts_on_a_host_without_proxmox():
    # Real: both commands print nothing on this project's Debian 12 build container.
    assert PveVersionFact().process([]).present is False
    info = ProxmoxBootTool().process([])
    assert info.status.present is False and info.kernels == [] and info.pinned is None
    assert PveVersionFact().default().present is False
    assert ProxmoxBootTool().default().status.present is False
    assert PveVersionFact().command().endswith("|| true")
    assert ProxmoxBootTool().command().endswith("true")


# --- ESPs the tool skips: reported, never dropped ---------------------------------------------


def test_stale_esp_is_a_problem_not_an_esp():
    status = parse_proxmox_boot_tool_status(
        read("proxmox/boot_tool_status_grub_legacy_stale_edgar.txt"))
    assert (status.mode, status.esps, status.booted_uefi) == ("grub", ["EEC6-6947"], False)
    (problem,) = status.esp_problems
    assert (problem.uuid, problem.problem) == ("EEC8-2CDA", "missing")
    message = esp_problem_message(problem)
    assert message.startswith("ESP EEC8-2CDA: listed in /etc/kernel/proxmox-boot-uuids")
    assert "`proxmox-boot-tool clean`" in message


def test_stale_esp_on_a_systemd_boot_host():
    status = parse_proxmox_boot_tool_status(read("proxmox/boot_tool_status_uefi_2esp_stale.txt"))
    assert [(p.uuid, p.problem) for p in status.esp_problems] == [("CE07-1118", "missing")]


def test_esp_that_fails_to_mount_names_the_partition():
    status = parse_proxmox_boot_tool_status(
        read("proxmox/boot_tool_status_grub_legacy_mount_failed_tanaka.txt"))
    assert status.esps == ["1FDB-C48E"]
    (problem,) = status.esp_problems
    assert (problem.uuid, problem.problem) == ("1FDE-91BC", "mount failed")
    assert problem.detail == "can't read superblock on /dev/sdc2."
    message = esp_problem_message(problem)
    assert "could not mount it (can't read superblock on /dev/sdc2.)" in message
    assert "`fsck.vfat -a /dev/sdc2`" in message
    assert "`proxmox-boot-tool init /dev/sdc2`" in message


@pytest.mark.parametrize(
    ("line", "uuid", "kind"),
    [  # proxmox-kernel-helper's other _status_detail lines (no public capture found)
        ("WARN: 12345678 read from /etc/kernel/proxmox-boot-uuids does not look like a "
         "VFAT-UUID - skipping", "12345678", "not a VFAT UUID"),
        ("creation of mountpoint /var/tmp/espmounts/AB12-CD34 failed - skipping", "AB12-CD34",
         "mount failed"),
        ("umount of /dev/disk/by-uuid/AB12-CD34 failed - failure", "AB12-CD34",
         "umount failed"),
        ("AB12-CD34 is configured with: ", "AB12-CD34", "no boot loader"),
    ],
)
def test_other_skipped_esp_lines(line, uuid, kind):
    text = f"System currently booted with uefi\n{line}\n"
    (problem,) = parse_proxmox_boot_tool_status(text).esp_problems
    assert (problem.uuid, problem.problem) == (uuid, kind)
    assert esp_problem_message(problem).startswith(f"ESP {uuid}: ")


@pytest.mark.parametrize(
    "name",
    ["boot_tool_status_uefi_1esp.txt", "boot_tool_status_grub_legacy.txt",
     "boot_tool_status_not_configured.txt"],
)
def test_healthy_status_has_no_esp_problem(name):
    assert parse_proxmox_boot_tool_status(read(f"proxmox/{name}")).esp_problems == []

"""Kernel cmdline tokens and /etc/default/grub edits (Debian's shipped file as input)."""

from pathlib import Path

from gpunode.facts.cmdline import (
    CMDLINE_COMMAND,
    edit_grub_default,
    grub_cmdline_value,
    merge_cmdline,
    missing_params,
    parse_cmdline_sections,
    split_cmdline,
)
from gpunode.facts.sections import section_command
from gpunode.ops.cmdline import set_grub_default_entry

DATA = Path(__file__).parents[1] / "data"
DEBIAN_GRUB = (DATA / "grub" / "debian12-default-grub").read_text()


def test_split_keeps_quoted_values():
    assert split_cmdline('BOOT_IMAGE=/vmlinuz root=UUID=ab ro dyndbg="file x.c +p" quiet\n') == [
        "BOOT_IMAGE=/vmlinuz", "root=UUID=ab", "ro", 'dyndbg="file x.c +p"', "quiet"]


def test_merge_replaces_in_place_appends_and_never_duplicates():
    tokens = ["quiet", "processor.max_cstate=5", "iommu=pt", "processor.max_cstate=3"]
    merged = merge_cmdline(tokens, {"processor.max_cstate": "1", "amd_pstate": "active"})
    assert merged == ["quiet", "processor.max_cstate=1", "iommu=pt", "amd_pstate=active"]
    assert merge_cmdline(merged, {"processor.max_cstate": "1", "amd_pstate": "active"}) == merged


def test_missing_params():
    booted = ["ro", "processor.max_cstate=1"]
    wanted = {"processor.max_cstate": "1", "intel_idle.max_cstate": "1", "nosmt": None}
    assert missing_params(booted, wanted) == {"intel_idle.max_cstate": "1", "nosmt": None}


def test_edit_debian_grub_keeps_every_other_line():
    tokens = merge_cmdline(split_cmdline(grub_cmdline_value(DEBIAN_GRUB)),
                           {"processor.max_cstate": "1"})
    edited = edit_grub_default(DEBIAN_GRUB, tokens)
    assert grub_cmdline_value(edited) == "quiet processor.max_cstate=1"
    before, after = DEBIAN_GRUB.splitlines(), edited.splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert changed == [('GRUB_CMDLINE_LINUX_DEFAULT="quiet"',
                        'GRUB_CMDLINE_LINUX_DEFAULT="quiet processor.max_cstate=1"')]
    assert edit_grub_default(edited, tokens) == edited


def test_edit_adds_assignment_when_absent():
    assert edit_grub_default("GRUB_TIMEOUT=5", ["a=1"]) == (
        'GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX_DEFAULT="a=1"\n')


def test_grub_default_entry():
    entry = "Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux 6.1.0-28-amd64"
    edited = set_grub_default_entry(DEBIAN_GRUB, entry)
    assert f'GRUB_DEFAULT="{entry}"' in edited.splitlines()
    assert "GRUB_DEFAULT=0" not in edited.splitlines()


def test_parse_sections_grub_host():
    text = "\n".join([
        "@@gpunode:proc_cmdline", "BOOT_IMAGE=/boot/vmlinuz root=/dev/vda1 ro quiet", "",
        "@@gpunode:has_grub", "yes", "",
        "@@gpunode:grub_default", DEBIAN_GRUB.rstrip("\n"), "",
        "@@gpunode:has_kernel_cmdline", "",
        "@@gpunode:kernel_cmdline", "",
        "@@gpunode:boottool_mode", "",
    ])
    state = parse_cmdline_sections(text)
    assert state.booted[-1] == "quiet"
    assert state.systemd_boot is False
    assert state.configured == ["quiet"]
    assert state.grub_default_text == DEBIAN_GRUB
    assert state.kernel_cmdline_text is None


def test_parse_sections_systemd_boot_host_without_final_newline():
    text = "\n".join([
        "@@gpunode:proc_cmdline", "initrd=\\EFI\\proxmox\\initrd.img root=ZFS=rpool/ROOT/pve-1", "",
        "@@gpunode:has_grub", "",
        "@@gpunode:grub_default", "",
        "@@gpunode:has_kernel_cmdline", "yes", "",
        "@@gpunode:kernel_cmdline", "root=ZFS=rpool/ROOT/pve-1 boot=zfs", "",
        "@@gpunode:boottool_mode", "uefi", "",
    ])
    state = parse_cmdline_sections(text)
    assert state.systemd_boot is True
    assert state.configured == ["root=ZFS=rpool/ROOT/pve-1", "boot=zfs"]
    assert state.grub_default_text is None


def test_section_command_ends_with_echo():
    assert section_command("x", "cat /f").endswith("; echo")


def test_grub_default_entry_keeps_the_blank_line_above_it():
    """Found by the Ansible bench: `^\\s*` swallowed the blank line before GRUB_DEFAULT."""
    entry = "Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux 6.1.0-28-amd64"
    once = set_grub_default_entry(DEBIAN_GRUB, entry)
    assert len(once.splitlines()) == len(DEBIAN_GRUB.splitlines())
    assert once.splitlines()[4] == ""
    assert set_grub_default_entry(once, entry) == once


def test_parse_sections_reads_skipped_esps_from_the_status():
    """proxmox-boot-tool status with stderr: the stale ESP of a real systemd-boot host."""
    status = (DATA / "proxmox" / "boot_tool_status_uefi_2esp_stale.txt").read_text()
    text = "\n".join([
        "@@gpunode:proc_cmdline", "root=ZFS=rpool/ROOT/pve-1 boot=zfs", "",
        "@@gpunode:has_kernel_cmdline", "yes", "",
        "@@gpunode:kernel_cmdline", "root=ZFS=rpool/ROOT/pve-1 boot=zfs", "",
        "@@gpunode:boottool_status", status.rstrip("\n"), "",
    ])
    state = parse_cmdline_sections(text)
    assert state.systemd_boot is True
    assert [(p.uuid, p.problem) for p in state.esp_problems] == [("CE07-1118", "missing")]


def test_cmdline_command_keeps_the_tools_warnings():
    assert "proxmox-boot-tool status 2>&1" in CMDLINE_COMMAND


# --- /etc/default/grub.d drop-ins ---------------------------------------------------------

def test_dropins_are_read_in_name_order_and_expand_the_variable():
    from gpunode.facts.cmdline import grub_effective_value

    dropins = {
        "/etc/default/grub.d/60-serial.cfg":
            'GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT} console=ttyS0,115200"\n',
        "/etc/default/grub.d/50-cloudimg-settings.cfg":
            'GRUB_TIMEOUT=0\nGRUB_CMDLINE_LINUX_DEFAULT="console=tty1"\n',
        "/etc/default/grub.d/proxmox-ve.cfg": 'GRUB_DISTRIBUTOR="Proxmox VE"\n',
    }
    main = 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'
    var = "GRUB_CMDLINE_LINUX_DEFAULT"
    assert grub_effective_value(main, dropins, var) == (
        "console=tty1 console=ttyS0,115200", "/etc/default/grub.d/60-serial.cfg")
    assert grub_effective_value(main, {}, var) == ("quiet", "/etc/default/grub")
    assert grub_effective_value(main, dropins, var,
                                skip=("/etc/default/grub.d/60-serial.cfg",))[0] == "console=tty1"


def test_dropin_listing_is_split_per_file():
    from gpunode.facts.cmdline import parse_cmdline_sections

    text = "\n".join([
        "@@gpunode:proc_cmdline", "ro quiet", "",
        "@@gpunode:has_grub", "yes", "",
        "@@gpunode:grub_default", 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"', "",
        "@@gpunode:grub_dropins",
        "==> /etc/default/grub.d/50-conflict.cfg <==",
        'GRUB_CMDLINE_LINUX_DEFAULT="quiet processor.max_cstate=5"', "",
        "==> /etc/default/grub.d/proxmox-ve.cfg <==", 'GRUB_DISTRIBUTOR="Proxmox VE"', "", "",
    ])
    state = parse_cmdline_sections(text)
    assert state.grub_dropins == {
        "/etc/default/grub.d/50-conflict.cfg":
            'GRUB_CMDLINE_LINUX_DEFAULT="quiet processor.max_cstate=5"\n',
        "/etc/default/grub.d/proxmox-ve.cfg": 'GRUB_DISTRIBUTOR="Proxmox VE"\n',
    }
    assert state.configured == ["quiet", "processor.max_cstate=5"]
    assert state.dropins_setting("GRUB_CMDLINE_LINUX_DEFAULT") == [
        "/etc/default/grub.d/50-conflict.cfg"]


def test_gpunode_dropin_is_valid_shell_and_holds_every_token():
    import subprocess

    from gpunode.facts.cmdline import CmdlineState
    from gpunode.ops.cmdline import grub_dropin_text

    state = CmdlineState(grub_default_text='GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n', grub_dropins={
        "/etc/default/grub.d/50-conflict.cfg":
            'GRUB_CMDLINE_LINUX_DEFAULT="quiet processor.max_cstate=5"\n'})
    entry = "Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux 6.1.0-28-amd64"
    text = grub_dropin_text(state, {"processor.max_cstate": "1", "iommu": "pt"}, entry)
    script = text + 'printf "%s\\n" "$GRUB_CMDLINE_LINUX_DEFAULT" "$GRUB_DEFAULT"\n'
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["quiet processor.max_cstate=1 iommu=pt", entry]


# grub-mkconfig's own reading of the settings (GRUB's util/grub-mkconfig.in, as Debian 12/13
# ship it in /usr/sbin/grub-mkconfig): the main file, then every grub.d/*.cfg in glob order.
GRUB_MKCONFIG_SOURCING = """
if test -f ${sysconfdir}/default/grub ; then
  . ${sysconfdir}/default/grub
fi
for x in ${sysconfdir}/default/grub.d/*.cfg ; do
  if [ -e "${x}" ]; then
    . "${x}"
  fi
done
printf '%s\\n' "$GRUB_CMDLINE_LINUX_DEFAULT" "$GRUB_DEFAULT"
"""


def test_update_grub_sees_gpunodes_parameters_over_a_conflicting_dropin(tmp_path):
    """The files on disk as gpunode leaves them, read by a real shell the way grub-mkconfig
    reads them: gpunode's values win, and the Python model of that reading agrees."""
    import subprocess

    from gpunode.facts.cmdline import GPUNODE_GRUB_DROPIN, CmdlineState
    from gpunode.ops.cmdline import grub_dropin_text

    main = 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'
    conflict = ('GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT '
                'processor.max_cstate=5 console=ttyS0,115200"\nGRUB_DEFAULT=saved\n')
    dropins = {"/etc/default/grub.d/50-conflict.cfg": conflict}
    state = CmdlineState(grub_default_text=main, grub_dropins=dropins)
    entry = ("Advanced options for Debian GNU/Linux>Debian GNU/Linux, "
             "with Linux 6.12.117+deb13-amd64")
    ours = grub_dropin_text(state, {"processor.max_cstate": "1", "amd_pstate": "active"}, entry)
    etc = tmp_path / "etc" / "default"
    (etc / "grub.d").mkdir(parents=True)
    (etc / "grub").write_text(main)
    (etc / "grub.d" / "50-conflict.cfg").write_text(conflict)
    (etc / "grub.d" / "zz-gpunode.cfg").write_text(ours)
    out = subprocess.run(["sh", "-c", GRUB_MKCONFIG_SOURCING], capture_output=True, text=True,
                         env={"sysconfdir": str(tmp_path / "etc"), "PATH": "/usr/bin:/bin"},
                         check=True).stdout.splitlines()
    assert out == ["quiet processor.max_cstate=1 console=ttyS0,115200 amd_pstate=active", entry]
    after = CmdlineState(grub_default_text=main,
                         grub_dropins={**dropins, GPUNODE_GRUB_DROPIN: ours})
    assert " ".join(after.configured) == out[0]
    assert after.grub_value("GRUB_DEFAULT")[0] == entry

"""Quoting in one place: shell templates quote every variable, the command builder quotes
every word, and the scripts run for real in a shell (with stand-ins for setpci and sysfs)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from gpunode.ops.files import render_template
from gpunode.ops.pcie import write_and_verify_command
from gpunode.ops.shell import argv_text
from gpunode.profile.node import NodeProfile
from gpunode.roles.host_tuning import boot_script_variables
from tests.unit.shell_render import container_shell
from tests.unit.test_hostile_values import ROOTS

TEMPLATES = Path(__file__).parents[2] / "gpunode" / "templates"
# Scripts, and files a shell sources (update-grub reads grub.d/*.cfg with '.').
SHELL_TEMPLATES = sorted([*TEMPLATES.glob("shell/*.j2"), *TEMPLATES.glob("boot/*.sh.j2"),
                          *TEMPLATES.glob("verify/*.sh.j2"), *TEMPLATES.glob("grub/*.cfg.j2")])
#: Templates no shell reads: config files for systemd, sysctl, apt, PAM limits, modules-load,
#: modprobe.d.
#: Every value in them is one line (the text rule) held to a pattern; a new template must be
#: put in one of the two lists (test_every_template_is_classified).
CONFIG_TEMPLATES = sorted([*TEMPLATES.glob("systemd/*.j2"), *TEMPLATES.glob("sysctl/*.j2"),
                           *TEMPLATES.glob("apt/*.j2"), *TEMPLATES.glob("limits/*.j2"),
                           *TEMPLATES.glob("modules-load/*.j2"), *TEMPLATES.glob("modprobe/*.j2")])


def test_every_template_is_classified():
    """No template escapes the quoting rule: each is a shell template (every variable
    shquoted, below) or a config template that no shell reads."""
    every = sorted(TEMPLATES.rglob("*.j2"))
    assert every == sorted([*SHELL_TEMPLATES, *CONFIG_TEMPLATES])
    assert not set(SHELL_TEMPLATES) & set(CONFIG_TEMPLATES)
    assert any(p.parent.name == "verify" for p in SHELL_TEMPLATES)
EXPRESSION = re.compile(r"{{(.*?)}}", re.S)


@pytest.mark.parametrize("path", SHELL_TEMPLATES, ids=lambda p: p.name)
def test_every_variable_of_a_shell_template_is_quoted(path):
    expressions = EXPRESSION.findall(path.read_text())
    assert expressions, "a shell template without variables needs no template"
    for expression in expressions:
        assert re.search(r"\|\s*shquote\s*$", expression), f"{path.name}: {{{{{expression}}}}}"


def test_argv_keeps_each_value_one_word():
    words = ["apt-mark", "hold", "a b", "$(reboot)", "`id`", "x;y", "-rf", "it's"]
    assert shlex.split(argv_text(*words)) == words


@pytest.mark.parametrize("shell", ["bash", "dash"])
def test_boot_script_is_valid_shell(shell):
    script = render_template("boot/gpunode-tune.sh.j2", **boot_script_variables(NodeProfile()))
    proc = subprocess.run([shell, "-n"], input=script, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("shell", ["bash", "dash"])
def test_device_nodes_script_is_valid_shell(shell):
    script = render_template("boot/gpunode-nvidia-nodes.sh.j2", unit="gpunode-nvidia-nodes")
    proc = subprocess.run([shell, "-n"], input=script, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


EXTRA_LXC_LINES = [
    "lxc.hook.pre-start: /usr/local/bin/check-gpu $(id)",
    "lxc.apparmor.raw: deny /srv/** w, # $(touch /tmp/gpunode-pwned); x",
    "lxc.environment: A='b c' `id`",
    "lxc.mount.entry: /srv/models srv/models none bind,create=dir 0 0",
]


def test_extra_lxc_lines_with_shell_syntax_stay_inert():
    """Lines Proxmox accepts carry shell syntax into the config, never into gpunode's shell."""
    from gpunode.profile.container import ContainerSpec

    spec = ContainerSpec.model_validate({**ROOTS[ContainerSpec], "extra_lxc": EXTRA_LXC_LINES})
    for text in container_shell(spec):
        proc = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    append = container_shell(spec)[2]
    words = shlex.split(append)
    for line in EXTRA_LXC_LINES:
        assert line in words


@pytest.mark.parametrize(
    "line",
    [
        "lxc.mount.entry: /dev/../dev/nvidia0 dev/nvidia0 none bind,create=file",
        "lxc.mount.entry: /srv/models ../../etc none bind,create=dir",
        "lxc.mount.entry: /srv//models srv/models none bind",
        "lxc.mount.entry: /srv/models srv/./models none bind",
        "lxc.mount.fstab: /etc/../root/fstab",
        "lxc.cap.drop: sys_admin\nlxc.hook.start: /bin/sh",
        "lxc.cgroup2.devices.allow: c 10:200 rwm; touch /tmp/gpunode-pwned",
    ],
)
def test_extra_lxc_mount_paths_are_normalised(line):
    from gpunode.profile.container import ContainerSpecError, validate_containers

    with pytest.raises(ContainerSpecError) as error:
        validate_containers("pve1", [{**ROOTS_SPEC, "extra_lxc": [line]}], {}, 8)
    assert "pve1: containers[0].extra_lxc[0]" in str(error.value)


ROOTS_SPEC = {
    "vmid": 110,
    "hostname": "llm-a",
    "ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
}

SETPCI_STUB = """#!/bin/sh
# setpci stand-in: one Device Control word kept in $STATE; 'accept' decides if writes stick.
[ "$1" = -s ] || exit 2
case "$3" in
    CAP_EXP+8.w) cat "$STATE" ;;
    CAP_EXP+8.w=*)
        [ "$ACCEPT" = 1 ] || exit 0
        arg=${3#CAP_EXP+8.w=}; value=0x${arg%:*}; mask=0x${arg#*:}
        old=0x$(cat "$STATE")
        printf '%04x\\n' $(( (old & ~mask) | (value & mask) )) > "$STATE" ;;
esac
"""


def _run_write(tmp_path: Path, accept: bool) -> tuple[subprocess.CompletedProcess, Path]:
    bdf = "0000:01:00.0"
    (tmp_path / "bin").mkdir()
    stub = tmp_path / "bin" / "setpci"
    stub.write_text(SETPCI_STUB)
    stub.chmod(0o755)
    (tmp_path / "devices" / bdf).mkdir(parents=True)
    state = tmp_path / "devctl"
    state.write_text("2930\n")  # MaxReadReq 512 (bits 14:12 = 2), other bits set
    refused = tmp_path / "refused"
    command = write_and_verify_command(bdf, 4096, str(refused), str(tmp_path / "devices"))
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "STATE": str(state),
           "ACCEPT": "1" if accept else "0"}
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env)
    return proc, state


def test_device_that_accepts_max_read_request(tmp_path):
    """The branch real GPUs take: the write sticks, only bits 14:12 change, no record."""
    (tmp_path / "refused").mkdir()
    (tmp_path / "refused" / "0000:01:00.0").write_text("4096\n")  # refused at an earlier try
    proc, state = _run_write(tmp_path, accept=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert state.read_text().strip() == "5930"  # 0x2930 with bits 14:12 = 5, the rest kept
    assert not (tmp_path / "refused" / "0000:01:00.0").exists()


def test_device_that_keeps_its_max_read_request_is_recorded(tmp_path):
    proc, state = _run_write(tmp_path, accept=False)
    assert proc.returncode == 0
    assert "device 0000:01:00.0 did not accept MaxReadReq=4096 (reads 512)" in proc.stderr
    assert (tmp_path / "refused" / "0000:01:00.0").read_text().strip() == "4096"
    assert state.read_text().strip() == "2930"

"""The bench's Ansible playbook (bench/ansible/tuning.yml) stays the same tuning as gpunode's
lab profile: every file it renders from gpunode's templates comes out byte for byte as gpunode
renders it for that profile, and its runtime values are the profile's. Without this the
side-by-side bench measures two different tunings (it did once: the templates moved into the
package and the playbook's path and variables went stale)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from jinja2 import Environment, meta

from gpunode.ops.cpu import cstate_script_variables
from gpunode.ops.files import render_template
from gpunode.ops.pcie import pcie_script_variables
from gpunode.ops.shell import TEMPLATES
from gpunode.profile.node import NodeProfile
from gpunode.profile.sysctls import BEST_EFFORT_SYSCTLS
from gpunode.roles.host_tuning import (
    BOOT_SCRIPT,
    BOOT_UNIT_FILE,
    LIMITS_FILE,
    MODULES_FILE,
    SYSCTL_FILE,
    SYSTEMD_MEMLOCK_FILE,
    boot_script_variables,
    memlock_values,
)
from lab.profile import LAB_PROFILE

PLAYBOOK_FILE = Path(__file__).parents[2] / "bench" / "ansible" / "tuning.yml"
PLAY = yaml.safe_load(PLAYBOOK_FILE.read_text())[0]
PLAY_VARS = PLAY["vars"]
PROFILE = NodeProfile.model_validate(LAB_PROFILE)
REFERENCE = re.compile(r"\A\{\{ (\w+) \}\}\Z")


def gpunode_files() -> dict[str, str]:
    """What gpunode writes on the lab node, path -> content (host_tuning's variables)."""
    kib, systemd_value = memlock_values(PROFILE.memlock)
    return {
        SYSCTL_FILE: render_template("sysctl/90-gpunode.conf.j2", sysctls=PROFILE.sysctls,
                                     best_effort=BEST_EFFORT_SYSCTLS & set(PROFILE.sysctls)),
        MODULES_FILE: render_template("modules-load/gpunode.conf.j2", modules=PROFILE.modules),
        BOOT_SCRIPT: render_template("boot/gpunode-tune.sh.j2",
                                     **boot_script_variables(PROFILE)),
        BOOT_UNIT_FILE: render_template("systemd/gpunode-tune.service.j2", script=BOOT_SCRIPT,
                                        persistence=PROFILE.gpu_persistence),
        LIMITS_FILE: render_template("limits/90-gpunode-memlock.conf.j2", memlock_kib=kib),
        SYSTEMD_MEMLOCK_FILE: render_template("systemd/90-gpunode-memlock.conf.j2",
                                              memlock_systemd=systemd_value),
    }


def resolved(value: object, variables: dict) -> object:
    """A play variable as Ansible sees it, for the one form the playbook uses ("{{ name }}")."""
    match = REFERENCE.match(value) if isinstance(value, str) else None
    return variables[match.group(1)] if match else value


def playbook_files() -> dict[str, str]:
    """What the playbook's template tasks write: path -> content."""
    files = {}
    for task in PLAY["tasks"]:
        args = task.get("ansible.builtin.template")
        if args is None:
            continue
        variables = {**PLAY_VARS, "playbook_dir": str(PLAYBOOK_FILE.parent)}
        variables |= {k: resolved(v, variables) for k, v in task.get("vars", {}).items()}
        src = Path(args["src"].replace("{{ templates_dir }}", str(
            PLAYBOOK_FILE.parent / "../../gpunode/templates")))
        assert src.is_file(), f"{task['name']}: {src} is not a template of gpunode"
        name = str(src.resolve().relative_to(PLAYBOOK_FILE.parents[2] / "gpunode/templates"))
        files[resolved(args["dest"], variables)] = render_template(name, **variables)
    return files


def test_the_playbook_reads_gpunodes_templates_from_the_package():
    assert PLAY_VARS["templates_dir"] == "{{ playbook_dir }}/../../gpunode/templates"


@pytest.mark.parametrize("path", sorted(gpunode_files()))
def test_each_file_the_playbook_writes_is_gpunodes_byte_for_byte(path):
    assert playbook_files().get(path) == gpunode_files()[path]


def test_the_runtime_values_are_the_lab_profiles():
    assert PLAY_VARS["sysctls"] == PROFILE.sysctls
    assert set(PLAY_VARS["best_effort"]) == BEST_EFFORT_SYSCTLS & set(PROFILE.sysctls)
    assert PLAY_VARS["modules"] == PROFILE.modules
    assert PLAY_VARS["max_read_request"] == PROFILE.max_read_request
    assert PLAY_VARS["max_cstate"] == PROFILE.max_cstate
    assert PLAY_VARS["governor"] == PROFILE.cpu_governor
    assert PLAY_VARS["selector"] == PROFILE.pcie_selector.model_dump()
    rules = {**pcie_script_variables(PROFILE.pcie_selector, PROFILE.max_read_request),
             **cstate_script_variables()}
    assert {k: PLAY_VARS[k] for k in rules} == rules  # gpunode's rules, as the boot script's data


def test_the_templates_includes_resolve_where_ansible_looks():
    """Ansible's template action searches <playbook dir>/templates, the playbook dir and the
    template's own folder (and their templates/): the shared shell library the boot script
    includes is found through bench/ansible/templates (a link to gpunode's templates)."""
    for task in PLAY["tasks"]:
        args = task.get("ansible.builtin.template")
        if args is None:
            continue
        src = Path(args["src"].replace("{{ templates_dir }}", str(
            PLAYBOOK_FILE.parent / "../../gpunode/templates")))
        roots = [PLAYBOOK_FILE.parent / "templates", PLAYBOOK_FILE.parent, src.parent,
                 src.parent / "templates"]
        for name in meta.find_referenced_templates(Environment().parse(src.read_text())):
            assert name is not None and any((root / name).is_file() for root in roots), name


def test_the_shquote_filter_ansible_loads_is_gpunodes():
    namespace: dict = {}
    exec((PLAYBOOK_FILE.parent / "filter_plugins" / "shquote.py").read_text(), namespace)
    shquote = namespace["FilterModule"]().filters()["shquote"]
    for value in ("a b'c", 4096, "$(reboot)"):
        assert shquote(value) == TEMPLATES.filters["shquote"](value)

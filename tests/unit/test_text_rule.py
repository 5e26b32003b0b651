"""One text rule for every user value (issue 28, item 1): every character that any reader or
writer treats as a line break (str.splitlines' separators) or a control is refused in every
string slot of every schema, naming host and field; digits are ASCII only."""

from __future__ import annotations

import pytest

from gpunode.profile.allowed import FORBIDDEN_TEXT
from tests.unit.test_hostile_values import (
    CASES,
    ROOTS,
    _field_in_error,
    _placed,
    _validate,
)

#: Every separator str.splitlines() splits on, NUL, a C0 and a C1 control, DEL.
LINE_BREAKS = ["\n", "\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
CONTROLS = ["\x00", "\x01", "\x1b", "\x7f", "\x9b"]


def test_the_rule_covers_every_splitlines_separator():
    for code in range(0x110000):
        char = chr(code)
        if len(("a" + char + "b").splitlines()) > 1:
            assert FORBIDDEN_TEXT.search(char), f"U+{code:04X} splits lines but passes"


@pytest.mark.parametrize(("model", "path", "kind"), CASES)
def test_line_breaks_and_controls_refused_in_every_field(model, path, kind):
    base = ROOTS[model]
    for char in LINE_BREAKS + CONTROLS:
        # A value each field would otherwise take ('lxc.cap.drop: sys_time' for extra_lxc,
        # 'performance' for a governor ...): the break is the only thing wrong with it.
        value = f"a{char}b"
        obj, error = _validate(model, _placed(base, path, kind, value))
        assert error is not None, f"{'.'.join(path)}[{kind}] took {value!r}"
        assert _field_in_error(model, path) in error, error


def test_extra_lxc_second_line_after_unicode_separator_refused():
    base = ROOTS[next(m for m in ROOTS if m.__name__ == "ContainerSpec")]
    for sep in ("\u2028", "\x85", "\x1e"):
        line = f"lxc.cap.drop: sys_time{sep}lxc.hook.pre-start: /bin/sh -c id"
        obj, error = _validate(next(m for m in ROOTS if m.__name__ == "ContainerSpec"),
                               {**base, "extra_lxc": [line]})
        assert error is not None and "extra_lxc[0]" in error, error


NON_ASCII_DIGITS = ["\u0663", "\uff13", "\u0969"]  # Arabic-Indic 3, full-width 3, Devanagari 3


@pytest.mark.parametrize("digit", NON_ASCII_DIGITS)
def test_non_ascii_digits_refused(digit):
    from gpunode.profile.container import ContainerSpecError, validate_containers
    from gpunode.profile.loader import ProfileError, load_profile

    base = {"vmid": 110, "hostname": "llm-a",
            "ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"}
    for field, value in [("cpuset_cpus", f"0-{digit}"), ("cpuset_mems", digit),
                         ("net0", f"name=eth0,bridge=vmbr0,mtu=150{digit}"),
                         ("net0", f"name=eth0,bridge=vmbr0,tag={digit}")]:
        with pytest.raises(ContainerSpecError) as err:
            validate_containers("pve1", [{**base, field: value}], {}, 8)
        assert f"pve1: containers[0].{field}" in str(err.value)
    with pytest.raises(ProfileError) as perr:
        load_profile("gpu-07", {"gpunode": {"gpu_power_limit": {digit: 300}}})
    assert "gpu-07: gpunode.gpu_power_limit" in str(perr.value)


def test_reversed_cpu_range_names_host_and_field():
    from gpunode.profile.container import ContainerSpecError, validate_containers

    base = {"vmid": 110, "hostname": "llm-a",
            "ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"}
    with pytest.raises(ContainerSpecError) as err:
        validate_containers("pve1", [{**base, "cpuset_cpus": "3-0"}], {}, 8)
    text = str(err.value)
    assert "pve1: containers[0].cpuset_cpus" in text and "'3-0'" in text and "Fix:" in text

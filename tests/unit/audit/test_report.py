"""render_table / render_markdown / to_json / report files, on the two captured nodes."""

import json

import pytest

from gpunode.profile.check import Check, subject_of
from gpunode.roles.audit.checks import audit_checks
from gpunode.roles.audit.report import (
    exit_status,
    fold_ok,
    pending_lines,
    render_markdown,
    render_table,
    report_formats,
    report_stem,
    to_json,
    verdict,
    write_reports,
)

from ._nodes import healthy, misconfigured


@pytest.fixture(scope="module")
def bad():
    return audit_checks(*misconfigured())


@pytest.fixture(scope="module")
def good():
    return audit_checks(*healthy())


def test_table_sections_in_order_and_ranked(bad):
    text = render_table("gpu07", bad)
    lines = text.splitlines()
    assert lines[0] == "gpu07: NOT READY: 24 open (P0 18, P1 6); P2 1, ok 5, limit 1, n/a 10"
    order = [text.index(h) for h in ("Actionable, ranked", "Confirmed good", "Known limits",
                                     "Not present / not applicable")]
    assert order == sorted(order)
    ranks = [line.split()[0] for line in lines if line.startswith(("  P0 ", "  P1 ", "  P2 "))]
    assert ranks == sorted(ranks) and ranks.count("P0") == 18 and ranks.count("P1") == 6
    assert "        fix: setpci -s 0000:41:00.0 CAP_EXP+8.w=5000:7000 (run deploy/site.py)" in lines
    header = next(line for line in lines if line.startswith("  RANK"))
    assert header.split() == ["RANK", "CHECK", "LIVE", "WANT", "SITE.PY"]
    assert "gpu07: pending reboot: kernel: running 6.8.12-5-pve -> 6.8.12-6-pve " \
           "(newest installed)" in lines
    assert "256 bytes is the device's maximum (DevCap)" in " ".join(text.split())
    # at most 100 columns with pyinfra's 4-column indent: long values wrap in the last column
    assert [line for line in lines if len(line) > 96] == []


def test_table_of_a_ready_node(good):
    text = render_table("gpu01", good)
    assert text.startswith("gpu01: READY: nothing open; P2 1, ok 37, limit 1, n/a 5\n")
    assert "pending" not in text


def test_fold_ok_rows_of_the_same_kind():
    rows = [Check(name=f"GPU{i} PCIe link width", status="ok", live="x16 (capability x16)",
                  kind="PCIe link width") for i in range(8)]
    rows += [Check(name=f"GPU{i} temperature", status="ok", live=f"{30 + i} C",
                   kind="GPU temperature") for i in range(2)]
    rows.append(Check(name="sysctl vm.swappiness", status="ok", live="10"))
    folded = fold_ok(rows)
    assert [(c.name, c.live) for c in folded] == [
        ("PCIe link width x8", "x16 (capability x16) (all 8)"),
        ("GPU temperature x2", "GPU0: 30 C; GPU1: 31 C"),
        ("sysctl vm.swappiness", "10"),
    ]
    assert subject_of(rows[0]) == "GPU0" and subject_of(rows[-1]) == ""


def test_markdown_lists_every_check(bad):
    text = render_markdown("gpu07", bad)
    assert text.startswith("# gpunode audit: gpu07\n\n**gpu07: NOT READY")
    for heading in ("## Actionable, ranked", "## Confirmed good", "## Known limits",
                    "## Not present / not applicable", "## Pending"):
        assert f"\n{heading}\n" in text
    assert "| Rank | Check | Live | Want | Fix | deploy/site.py applies it | Why |" in text
    assert ("| P0 | PCIe MaxReadReq 0000:41:00.0 [10de:2204] | 512 bytes | 4096 bytes | "
            "setpci -s 0000:41:00.0 CAP_EXP+8.w=5000:7000 (run deploy/site.py) | yes |") in text
    table_rows = [line for line in text.splitlines() if line.startswith("| ")
                  and not line.startswith(("| Rank", "| Check"))]
    assert len(table_rows) == len(bad)


def test_markdown_escapes_pipes():
    check = Check(name="x", status="P2", live="a|b", fix="c")
    assert "a\\|b" in render_markdown("h", [check])


def test_json_report(bad, good):
    data = to_json("gpu07", bad)
    assert json.loads(json.dumps(data)) == data
    assert (data["host"], data["ready"], data["open"], data["exit_status"]) == (
        "gpu07", False, 24, 1)
    assert data["counts"] == {"P0": 18, "P1": 6, "P2": 1, "ok": 5, "limit": 1, "n/a": 10}
    assert [c["status"] for c in data["checks"]][:18] == ["P0"] * 18
    first = data["checks"][0]
    assert set(first) == {"name", "status", "live", "want", "fix", "deploy_fixes", "kind",
                          "note", "pending"}
    assert len(data["pending"]["reboot"]) == 2 and data["pending"]["restart"] == []
    assert to_json("gpu01", good)["ready"] is True


def test_json_report_says_its_schema_version_gpunode_version_and_when(bad):
    import gpunode

    data = to_json("gpu07", bad, now=1_796_350_123.9)
    assert list(data)[:4] == ["schema_version", "gpunode_version", "host", "timestamp"]
    assert data["schema_version"] == 1 and data["gpunode_version"] == gpunode.__version__
    assert data["timestamp"] == "2026-12-04T02:08:43Z"


def test_table_columns_are_sized_by_content_and_names_are_never_cut():
    """Two sysctls that share their first 12 characters stay apart; a long live value wraps
    in its own column; the table stays within 96 columns (pyinfra adds 4)."""
    checks = [Check(name=f"sysctl net.core.{key}", status="P0", live="212992",
                    want="16777216", fix=f"sysctl -w net.core.{key}='16777216'")
              for key in ("rmem_max", "rmem_default")]
    checks.append(Check(name="PCIe MaxReadReq 0000:41:00.0 [10de:2204] x16",
                        status="P1", live="4096 131072 33554432 " * 4, want="x" * 60, fix="f"))
    text = render_table("h", checks)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 96, text
    for check in checks:
        assert any(f"  {check.name}  " in line for line in lines), check.name
    assert "~" not in text
    header = next(line for line in lines if line.strip().startswith("RANK"))
    assert header.index("LIVE") - header.index("CHECK") == len(checks[2].name) + 2
    assert header.rstrip().endswith("SITE.PY")


def test_exit_status_and_verdict():
    assert exit_status([]) == 0
    assert verdict("h", []) == "h: READY: nothing open; P2 0, ok 0, limit 0, n/a 0"
    minor = [Check(name="x", status="P2", live="y")]
    assert exit_status(minor) == 0
    assert exit_status(minor + [Check(name="z", status="P1", live="y")]) == 1


def test_pending_lines_restart():
    check = Check(name="CT 110 memlock", status="P1", live="configured unlimited; live 8388608",
                  want="unlimited", pending="restart")
    assert pending_lines("pve1", [check]) == [
        "pve1: pending restart: CT 110 memlock: configured unlimited; live 8388608 -> unlimited"]


@pytest.mark.parametrize(("value", "formats"), [
    (None, ()), ("", ()), ("none", ()), ("json", ("json",)), ("MD", ("md",)),
    ("both", ("json", "md")), ("json,md", ("json", "md")),
])
def test_report_formats(value, formats):
    assert report_formats(value) == formats


def test_report_formats_rejects_others():
    with pytest.raises(ValueError, match="use json, md, both or none"):
        report_formats("yaml")


def test_write_reports(tmp_path, bad):
    paths = write_reports("@pct/pve1:110", bad, ("json", "md"), tmp_path / "reports")
    assert [p.name for p in paths] == ["@pct_pve1_110.json", "@pct_pve1_110.md"]
    assert json.loads(paths[0].read_text())["open"] == 24
    assert paths[1].read_text() == render_markdown("@pct/pve1:110", bad)
    assert write_reports("h", bad, (), tmp_path / "none") == []
    assert not (tmp_path / "none").exists()
    assert report_stem("gpu01.example.org") == "gpu01.example.org"


@pytest.mark.parametrize(("active", "timeout", "expected"), [
    (None, None, None), ("0", None, None), ("1", None, 120), ("true", "300", 300),
    (1, 10, 10),
])
def test_active_mode_option(active, timeout, expected):
    from gpunode.roles.audit.report import active_timeout
    assert active_timeout(active, timeout) == expected


@pytest.mark.parametrize(("active", "timeout"), [("maybe", None), ("1", "5"), ("1", "1h"),
                                                 ("1", "99999")])
def test_active_mode_option_refused(active, timeout):
    from gpunode.roles.audit.report import active_timeout
    with pytest.raises(ValueError):
        active_timeout(active, timeout)


def _section(text: str, heading: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(heading) + 2  # the heading, then the table's header
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("  ")), len(lines))
    return lines[start:end]


def test_a_check_that_failed_never_shows_under_confirmed_good(bad):
    """Issue #17: every row under "Confirmed good" is a check whose status is ok (IOMMU off, a
    P0, a P1, a P2, a limit or a check that could not be read belong elsewhere)."""
    off = Check(name="IOMMU mode", status="n/a", live="off: 0 IOMMU groups", kind="IOMMU mode")
    checks = [*bad, off]
    text = render_table("gpu07", checks)
    good_rows = _section(text, "Confirmed good")
    ok_names = {c.name for c in fold_ok([c for c in checks if c.status == "ok"])}
    assert good_rows and all(any(row[2:].startswith(name) for name in ok_names)
                             for row in good_rows if not row.startswith("    ")), good_rows
    not_ok = [c.name for c in checks if c.status != "ok"]
    assert not [row for row in good_rows for name in not_ok if row[2:].startswith(name + " ")]

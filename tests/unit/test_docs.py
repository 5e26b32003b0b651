"""The schema is the one place a setting is documented: the settings tables of docs/ and each
role's defaults list are what tools/docs.py renders from it (`make docs` writes them). The
README is a front door: small, its test command and CI figure stated, every link resolving."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpunode.profile.docs import SettingDoc, doc_of, field_rows, markdown_table, shown
from gpunode.profile.node import NodeProfile, PcieSelector
from tools import docs


@pytest.mark.parametrize("path", docs.FILES, ids=lambda p: str(p.relative_to(docs.REPO)))
def test_generated_text_is_what_the_schema_renders(path):
    text = path.read_text()
    assert docs.BLOCK.search(text), f"{path}: no generated block"
    assert docs.regenerate(text) == text, f"{path}: stale settings text: run make docs"


def test_every_block_the_generator_knows_is_in_the_docs():
    text = "".join(path.read_text() for path in docs.DOCS)
    for name in docs.DOC_MODELS:
        assert text.count(f"<!-- gpunode:generated docs:{name} -->") == 1, name


README = docs.REPO / "README.md"
MARKDOWN = [README, docs.REPO / "bench" / "README.md", docs.REPO / "lab" / "README.md",
            docs.REPO / "CHANGELOG.md", *sorted((docs.REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def links(path: Path) -> list[str]:
    """The relative link targets of a Markdown file (web addresses and anchors left out)."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z]+:", t) and t[0] != "#"]


def test_the_readme_is_a_front_door():
    text = README.read_text()
    assert len(text.encode()) <= 10 * 1024, f"README.md is {len(text.encode())} bytes"
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "make test" in text and "the test command" in text  # .ci/run calls it
    assert re.search(r"took \*\*\d+ min \d+ s\*\* from a clean clone", text)  # CI's time
    assert "python -m build" in text and "pip install gpunode" in text  # honest install


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(docs.REPO)))
def test_every_link_resolves(path):
    broken = [t for t in links(path) if not (path.parent / t.split("#")[0]).resolve().exists()]
    assert broken == [], f"{path.name}: links to nothing: {broken}"


def test_every_page_of_docs_is_linked_from_the_readme():
    linked = {(README.parent / t).resolve() for t in links(README)}
    pages = set((docs.REPO / "docs").glob("*.md"))
    assert {p.resolve() for p in pages} - linked == set()


def test_every_host_setting_is_read_by_a_role_and_documented():
    read = {f for role in docs.ROLES if docs.role_defaults(role).SCHEMA is NodeProfile
            for f in docs.role_defaults(role).READS}
    assert set(NodeProfile.model_fields) - read == set(), "add the field to a role's READS"
    for name, info in NodeProfile.model_fields.items():
        assert info.description, f"{name}: no description"
    for role in docs.ROLES:
        module = docs.role_defaults(role)
        assert set(module.READS) <= set(module.SCHEMA.model_fields), role


def test_a_new_field_appears_with_its_halves():
    """The generator is generic: whatever a field says in the schema is in the table."""
    from pydantic import BaseModel, Field

    from gpunode.profile.docs import setting_doc

    class Profile(BaseModel):
        knob: int = Field(3, description="A knob.", json_schema_extra=setting_doc(
            why="knob was 1", runtime="`echo 3`", persistence="a file", readback="a | pipe"))
        table: dict[str, str] = Field(
            default_factory=lambda: {"a": "1", "b": "2"}, description="Keys.",
            json_schema_extra=setting_doc(entries={"a": SettingDoc(why="a was 0")}))
        needed: str = Field(description="Must be given.")

    rows = field_rows(Profile)
    assert [r["field"] for r in rows] == ["knob", "table", "table.a", "table.b", "needed"]
    assert rows[0] == {"field": "knob", "default": "`3`", "description": "A knob.",
                       "why": "knob was 1", "runtime": "`echo 3`", "persistence": "a file",
                       "readback": "a | pipe"}
    assert rows[2]["why"] == "a was 0" and rows[4]["default"] == "required"
    table = markdown_table(rows[:1], docs.HOST_COLUMNS)
    assert "| `knob` | `3` | A knob. | knob was 1 | `echo 3` | a file | a \\| pipe |" in table
    assert doc_of(Profile.model_fields["needed"]) == SettingDoc()


def test_defaults_as_shown():
    assert shown(None) == "null" and shown(True) == "true" and shown({}) == "{}"
    assert shown(["nvidia_peermem"]) == "[nvidia_peermem]"
    assert shown(PcieSelector()) == "vendor 10de, classes [0300, 0302]"


def test_check_mode(tmp_path, monkeypatch):
    stale = tmp_path / "defaults.py"
    stale.write_text('"""\n<!-- gpunode:generated role:kernel -->\nold\n'
                     '<!-- /gpunode:generated -->\n"""\n')
    monkeypatch.setattr(docs, "FILES", [stale])
    monkeypatch.setattr(docs, "REPO", tmp_path)
    assert docs.main(["--check"]) == 1
    assert docs.main([]) == 0
    assert docs.main(["--check"]) == 0
    assert "- max_cstate (default `1`)" in stale.read_text()

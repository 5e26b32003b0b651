"""The schema as the one place a setting is documented, and the text generated from it.

A field documents itself: its pydantic ``description`` (what it is), and in
``json_schema_extra=setting_doc(...)`` the audit finding it answers (``why``) and its three
halves: ``runtime`` (what changes the live node now), ``persistence`` (what keeps it across
a reboot) and ``readback`` (what confirms it). The settings tables of docs/ and each role's
defaults text are rendered from that (``make docs``, tools/docs.py); tests/unit/test_docs.py
fails when a generated block differs from what the schema renders.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.fields import FieldInfo

__all__ = [
    "SettingDoc",
    "doc_of",
    "field_rows",
    "markdown_table",
    "setting_doc",
    "shown",
    "text_list",
]

_KEY = "gpunode"


class SettingDoc(BaseModel):
    """What the schema says about one setting, beyond its description."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    why: str = ""
    """The audit finding it answers (or why its default is what it is)."""
    runtime: str = ""
    """How the live node is changed now."""
    persistence: str = ""
    """What keeps the value across a reboot."""
    readback: str = ""
    """What is read back to confirm it."""
    entries: dict[str, SettingDoc] = {}
    """For a mapping setting (sysctls): the same, per key of its default."""


def setting_doc(
    why: str = "",
    runtime: str = "",
    persistence: str = "",
    readback: str = "",
    entries: Mapping[str, SettingDoc] | None = None,
) -> dict[str, Any]:
    """The ``json_schema_extra`` of a documented Field."""
    doc = SettingDoc(why=why, runtime=runtime, persistence=persistence, readback=readback,
                     entries=dict(entries or {}))
    return {_KEY: doc.model_dump(exclude_defaults=True)}


def doc_of(info: FieldInfo) -> SettingDoc:
    extra = info.json_schema_extra
    raw = extra.get(_KEY) if isinstance(extra, dict) else None
    return SettingDoc.model_validate(raw or {})


def shown(value: Any) -> str:
    """A default as docs/settings.md shows it (YAML-like: null, true, [a, b], {})."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, BaseModel):
        parts = (f"{name} {shown(v)}" for name, v in value if v is not None)
        return ", ".join(parts)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {shown(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple, set, frozenset)):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return str(value)


def _default(info: FieldInfo) -> Any:
    return info.get_default(call_default_factory=True)


def field_rows(model: type[BaseModel], fields: Iterable[str] | None = None) -> list[dict[str, str]]:
    """One row per field (and per documented key of a mapping field), in declaration order:
    field, default, description, why, runtime, persistence, readback."""
    rows: list[dict[str, str]] = []
    wanted = list(model.model_fields) if fields is None else list(fields)
    for name in wanted:
        info = model.model_fields[name]
        doc = doc_of(info)
        default = None if info.is_required() else _default(info)
        keyed = isinstance(default, Mapping) and bool(doc.entries)
        default_text = "required" if info.is_required() else (
            "the keys below" if keyed else f"`{shown(default)}`")
        rows.append({"field": name, "default": default_text,
                     "description": info.description or "",
                     **doc.model_dump(exclude={"entries"})})
        if keyed and isinstance(default, Mapping):
            for key, value in default.items():
                entry = doc.entries.get(key, SettingDoc())
                rows.append({"field": f"{name}.{key}", "default": f"`{shown(value)}`",
                             "description": "", **entry.model_dump(exclude={"entries"})})
    return rows


def _cell(text: str, code: bool = False) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return f"`{text}`" if code and text else text


def markdown_table(rows: list[dict[str, str]], columns: Mapping[str, str]) -> str:
    """A markdown table of rows with columns {key: heading}; the field as code."""
    lines = ["| " + " | ".join(columns.values()) + " |",
             "|" + "|".join("---" for _ in columns) + "|"]
    for row in rows:
        cells = (_cell(row.get(key, ""), code=key == "field") for key in columns)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def text_list(rows: list[dict[str, str]], width: int = 96) -> str:
    """Plain wrapped text, one paragraph per field (for a module docstring)."""
    out: list[str] = []
    for row in rows:
        parts = [f"- {row['field']} (default {row['default']}): {row['description']}".rstrip()]
        for key, label in (("why", "Why"), ("runtime", "Now"), ("persistence", "At boot"),
                           ("readback", "Read back")):
            if row.get(key):
                parts.append(f"{label}: {row[key]}")
        text = " ".join(". ".join(part.rstrip(". ") for part in parts).split()) + "."
        out.extend(textwrap.wrap(text, width=width, subsequent_indent="  ",
                                 break_on_hyphens=False))
    return "\n".join(out) + "\n"

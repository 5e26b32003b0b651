"""Sectioned command output: many small reads in one remote command, split apart again."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

MARKER = "@@gpunode:"

ModelT = TypeVar("ModelT", bound=BaseModel)


class FactModel(BaseModel):
    """A frozen fact value that pyinfra's JSON output (`pyinfra INV fact ...`) can print."""

    model_config = ConfigDict(frozen=True)

    def to_json(self) -> dict:
        return self.model_dump(mode="json")


def section_command(name: str, command: str) -> str:
    """Shell that prints a marker line, then the output of command (errors silenced)."""
    return f"echo '{MARKER}{name}'; {{ {command} ; }} 2>/dev/null; echo"


def cat_command(path: str) -> str:
    """`cat PATH` in shell builtins, without a process (each costs ~50 ms on a slow guest):
    every line, also a last one without a newline. Only for small regular files, sysfs and
    seq_file /proc files: dash reads a byte a call, and /proc/sys (or a driver's own procfs)
    gives only the first byte that way, as a read at an offset is EOF there."""
    return f'while IFS= read -r l || [ -n "$l" ]; do printf \'%s\\n\' "$l"; done < {path}'


def grep_lines_command(paths: str, skip: str = "") -> str:
    """`grep -H . PATHS` in shell builtins (cat_command's rules: sysfs, not /proc/sys): each
    non-empty line of each readable file as PATH:LINE. skip: a `case` pattern of lines to
    leave out (`' 0'`: the lines `grep -v -E ' 0$'` drops). PATHS: globs or words, unquoted."""
    skipped = f"{skip}) ;; " if skip else ""
    return (f'for f in {paths}; do [ -f "$f" ] && [ -r "$f" ] || continue; '
            f'while IFS= read -r l || [ -n "$l" ]; do case $l in \'\') ;; {skipped}'
            f'*) printf \'%s:%s\\n\' "$f" "$l";; esac; done < "$f"; done')


def ls_command(folder: str) -> str:
    """`ls FOLDER` in shell builtins: the names in it, one a line, sorted, hidden ones left out."""
    return (f'for e in {folder}/*; do if [ -e "$e" ] || [ -L "$e" ]; then '
            f'printf \'%s\\n\' "${{e##*/}}"; fi; done')


def split_sections(text: str) -> dict[str, str]:
    """Split output produced by section_command() calls back into name -> text."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith(MARKER):
            current = sections.setdefault(line[len(MARKER):].strip(), [])
        elif current is not None:
            current.append(line)
    # section_command() ends each section with an echo, so a file without a final newline
    # can't swallow the next marker: drop that one added line.
    return {
        name: "\n".join(lines[:-1] if lines and lines[-1] == "" else lines)
        for name, lines in sections.items()
    }


def fact_data(value: Any) -> Any:
    """A fact's plain value: real facts give it as is, pyinfra_testing wraps it (FakeFact)."""
    return getattr(value, "data", value)


def as_model(model: type[ModelT], value: Any) -> ModelT:
    """A fact value as its model: real facts return models, test fixtures give plain data."""
    if isinstance(value, model):
        return value
    raw = fact_data(value)
    return model.model_validate(raw)


def as_models(model: type[ModelT], values: Any) -> list[ModelT]:
    """A list-valued fact as a list of models (see as_model)."""
    return [as_model(model, value) for value in fact_data(values)]

"""Build sectioned fact output (the inverse of gpunode.facts.sections.split_sections)."""

from gpunode.facts.sections import MARKER


def sections_text(**parts: str) -> str:
    """MARKER lines and texts as the facts' section_command() prints them."""
    return "\n".join(f"{MARKER}{name}\n{text}\n" for name, text in parts.items())

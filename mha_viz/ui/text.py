"""User-supplied text inside Streamlit messages: shown as text, never as Markdown or HTML."""

from __future__ import annotations

import re

_MARKDOWN = re.compile(r"([\\`*_\[\]<>~$&|:])")


def plain(text: str) -> str:
    """Backslash-escape the Markdown/HTML/LaTeX-active characters (links, emphasis, tags, math,
    entities, tables, autolinks) so st.* shows user text verbatim inside a message."""
    return _MARKDOWN.sub(r"\\\1", text)

"""User-supplied text inside Streamlit messages: shown as text, never as Markdown or HTML."""

from __future__ import annotations

import re

_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$&:])")


def plain(text: str) -> str:
    """Backslash-escape every Markdown/HTML/LaTeX-active character so st.* shows text verbatim."""
    return _MARKDOWN.sub(r"\\\1", text)

"""One door to the session's state: no module of mha_viz, nor app.py or page.py, names Streamlit's session_state
except mha_viz/ui/state.py (value, put, widget, keep, ...), the way test_layering forbids imports. Read as text, so
that an alias (`state = st.session_state`), a getattr string or a comment that invites a copy is caught too."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOOR = ROOT / "mha_viz" / "ui" / "state.py"
FILES = sorted([*(ROOT / "mha_viz").rglob("*.py"), ROOT / "app.py", ROOT / "page.py"])


def test_the_files_are_found() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in FILES}
    assert {"app.py", "page.py", "mha_viz/ui/views.py", "mha_viz/ui/controls.py", "mha_viz/ui/state.py"} <= names
    assert "session_state" in DOOR.read_text(encoding="utf-8")  # the word the test looks for is the door's own


@pytest.mark.parametrize("path", [p for p in FILES if p != DOOR], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_only_the_state_module_touches_session_state(path: Path) -> None:
    lines = [f"{n}: {line.strip()}" for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if "session_state" in line]
    assert lines == [], f"{path.relative_to(ROOT)} uses session_state: go through mha_viz.ui.state (value, put, ...)"

"""The page's side of the layout: captions say "1 head", and the width the browser reports is believed only when it
is a width (the figures' layout: tests/unit/test_layout.py)."""

from __future__ import annotations

import pytest
import streamlit as st

from mha_viz.figures import common
from tests.app.test_app import new_app


def test_one_head_is_singular_in_the_captions() -> None:
    at = new_app(h="1", d_model="16").run()
    captions = " ".join(c.value for c in at.caption)
    assert "h = 1 head ·" in captions and "1 head (numbered from 0)" in captions and "1 heads" not in captions
    assert common.plural(1, "head") == "1 head" and common.plural(4, "head") == "4 heads"


@pytest.mark.parametrize("reported", [float("nan"), -5, "wide", True, 1e12, None])
def test_a_width_the_browser_reports_is_believed_only_when_it_is_a_width(reported: object) -> None:
    from mha_viz.ui import style

    st.session_state[style.WIDTH_KEY] = {"width": reported}
    try:
        assert style.page_width() == style.WIDE_PX
        st.session_state[style.WIDTH_KEY] = {"width": 500}
        assert style.page_width() == 500 and style.is_narrow()
    finally:
        del st.session_state[style.WIDTH_KEY]

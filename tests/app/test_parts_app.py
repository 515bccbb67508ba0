"""Every view and analysis section the default page's source offers, from the registry: the menu offers it, it draws
without an error, the URL holds it, and a link with it reopens it. tests/app/test_recipes_app.py and
tests/app/test_registry_app.py run the same checks on parts added in one file by a test."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.params import DEFAULTS
from mha_viz.parts import SECTIONS, VIEWS
from tests.app.test_app import new_app

DEFAULT_VIEWS = [v for v in VIEWS.menu("Configurable") if not VIEWS.part(v).needs]  # the default page offers these
DEFAULT_SECTIONS = [s for s in SECTIONS.menu("Configurable") if not SECTIONS.part(s).needs]


def param(at: AppTest, key: str, default: object) -> object:
    """A URL parameter of the page (absent: its default, which to_query leaves out)."""
    value = at.query_params.get(key, default)
    return value[-1] if isinstance(value, list) else value


def drawn_cleanly(at: AppTest, name: str) -> None:
    assert not at.exception and not at.error, name
    assert not [w.value for w in at.warning if "URL parameter" in w.value], name  # no notice about a value


def check_view(name: str) -> None:
    at = new_app().run()
    menu = at.button_group(key="view")
    assert name in menu.options
    menu.set_value(name).run()
    drawn_cleanly(at, name)
    assert param(at, "view", DEFAULTS.view) == name
    again = new_app(view=name).run()
    drawn_cleanly(again, name)
    assert again.button_group(key="view").value == name


def check_section(name: str) -> None:
    at = new_app(view="Analysis").run()
    menu = at.button_group(key="section")
    assert name in menu.options
    menu.set_value(name).run()
    drawn_cleanly(at, name)
    assert param(at, "section", DEFAULTS.section) == name and param(at, "view", None) == "Analysis"
    again = new_app(view="Analysis", section=name).run()
    drawn_cleanly(again, name)
    assert again.button_group(key="section").value == name


@pytest.mark.parametrize("view", DEFAULT_VIEWS)
def test_every_view_is_offered_draws_and_reopens_from_its_link(view: str) -> None:
    check_view(view)


@pytest.mark.parametrize("section", DEFAULT_SECTIONS)
def test_every_section_is_offered_draws_and_reopens_from_its_link(section: str) -> None:
    check_section(section)

"""A view and an analysis section added as a contributor adds them (one file each, in a package of its own, found by
mha_viz.parts.Registry.discover: tests/unit/test_parts.py's toys) are in the app's menus, draw, keep their fields in
the URL and go into the share link: the registry (mha_viz.parts) drives all of them."""

from __future__ import annotations

from tests.app.test_app import new_app
from tests.app.test_export_app import deferred  # noqa: F401  (records the deferred downloads)
from tests.unit.test_parts import toys  # noqa: F401  (the fixture registering the toy view and section)


def markdown(at) -> str:
    return " ".join(m.value for m in at.markdown)


def link(at) -> str:
    at.session_state["export_open"] = True
    at.run()
    return " ".join(c.value for c in at.code)


def test_a_registered_view_is_in_the_menu_draws_and_is_shared(toys) -> None:  # noqa: F811
    at = new_app(h="2").run()
    assert not at.exception
    menu = at.button_group(key="view")
    assert "Toy view" in menu.options and menu.options.index("Toy view") == menu.options.index("Analysis") - 1
    menu.set_value("Toy view").run()
    assert not at.exception and not at.error
    assert "Toy view: 2 heads, n = 3" in markdown(at)
    at.number_input(key="toy_n").set_value(7).run()
    assert "n = 7" in markdown(at)
    assert at.query_params["toy_n"] in ("7", ["7"]) and at.query_params["view"] in ("Toy view", ["Toy view"])
    shared = link(at)
    assert "toy_n=7" in shared and "view=Toy%20view" in shared and "h=2" in shared


def test_the_report_names_the_registered_view_and_section(toys, deferred) -> None:  # noqa: F811
    at = new_app(h="2", view="Analysis", section="Toy section").run()
    link(at)
    report = next(fn for fn, mime, _ in deferred if mime == "text/html")()
    assert "Analysis: Which heads do what" in report and "Toy section: " in report
    deferred.clear()
    at.button_group(key="view").set_value("Toy view").run()
    report = next(fn for fn, mime, _ in deferred if mime == "text/html")()
    assert "Toy view: A view only the tests know." in report and "analysis section" not in report


def test_a_link_opens_a_registered_view_with_its_value(toys) -> None:  # noqa: F811
    at = new_app(view="Toy view", toy_n="5").run()
    assert not at.exception and not at.warning  # no "unknown URL parameter" notice
    assert at.button_group(key="view").value == "Toy view" and "n = 5" in markdown(at)


def test_a_registered_section_is_in_the_analysis_menu_and_is_shared(toys) -> None:  # noqa: F811
    at = new_app(view="Analysis").run()
    menu = at.button_group(key="section")
    assert menu.options[-1] == "Toy section"
    menu.set_value("Toy section").run()
    assert not at.exception and not at.error and "Toy section of layer 0: no word" in markdown(at)
    at.text_input(key="toy_word").input("hello").run()
    assert "Toy section of layer 0: hello" in markdown(at)
    shared = link(at)
    assert "section=Toy%20section" in shared and "toy_word=hello" in shared
    reopened = new_app(view="Analysis", section="Toy section", toy_word="again").run()
    assert not reopened.warning and "Toy section of layer 0: again" in markdown(reopened)


def test_without_the_registration_the_toy_parameters_are_unknown() -> None:
    at = new_app(view="Toy view", toy_n="5").run()
    assert not at.exception
    assert len(at.warning) == 2 and "unknown URL parameter 'toy\\_n'" in at.warning[1].value  # Markdown-escaped
    assert "Toy view" not in at.button_group(key="view").options

"""The "paper" preset read from the figure's JSON (no browser), and save_figure's errors before any drawing."""

from __future__ import annotations

import json
import sys
from itertools import pairwise

import numpy as np
import plotly.colors as pc
import pytest

import mha_viz
from mha_viz.figures import heads_figure
from mha_viz.figures.common import TOOLBAR_PX, text_px
from mha_viz.figures.paper import COLUMN_PX, FONT_PX, PX_PER_PT, paper_figure
from mha_viz.paper import FigureExportError, chromium_path, figure_format, save_figure

SENTENCE = "The animal didn't cross the street because it was tired"


def trace(text: str = SENTENCE, heads: int = 4) -> mha_viz.AttentionTrace:
    tokens, x = mha_viz.embed_text(text, 48)
    return mha_viz.MultiHeadAttention(48, heads, seed=0)(x, query_tokens=tokens)


def spec(fig) -> dict:
    return json.loads(fig.to_json())


def font_sizes(node, path: str = "") -> list[tuple[str, float]]:
    """Every font size set anywhere in a figure's JSON, with where it is."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("font", "tickfont") and isinstance(value, dict) and "size" in value:
                found.append((f"{path}.{key}", value["size"]))
            found += font_sizes(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += font_sizes(value, f"{path}[{i}]")
    return found


def luminance(colour: str) -> float:
    """WCAG relative luminance of a CSS colour (rgb(...) or #hex)."""
    r, g, b = (c / 255 for c in pc.unlabel_rgb(pc.convert_colors_to_same_type(colour, "rgb")[0][0]))
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def axes(fig: dict, letter: str) -> list[dict]:
    return [v for k, v in fig["layout"].items() if k.startswith(f"{letter}axis")]


@pytest.mark.parametrize("columns", [1, 2])
def test_width_is_a_column_or_the_text_width_and_fonts_stay_readable_in_print(columns: int) -> None:
    fig = spec(paper_figure(heads_figure(trace(), title="Every head of layer 0"), columns=columns))
    assert fig["layout"]["width"] == COLUMN_PX[columns] == {1: 3.5, 2: 7}[columns] * 96
    sizes = font_sizes(fig)
    assert len(sizes) >= 10  # the layout, the title, every axis's ticks and titles, the colour bar, the panel titles
    small = [(where, size) for where, size in sizes if size / PX_PER_PT < 8]
    assert not small, f"fonts below 8 pt at the printed size: {small}"
    assert fig["layout"]["font"]["size"] == pytest.approx(8 * PX_PER_PT)


def test_the_original_figure_is_left_as_it_was() -> None:
    fig = heads_figure(trace())
    before = fig.to_json()
    paper_figure(fig)
    assert fig.to_json() == before


def test_white_background_and_no_toolbar_strip() -> None:
    original = spec(heads_figure(trace()))
    fig = spec(paper_figure(heads_figure(trace())))
    assert fig["layout"]["paper_bgcolor"] == fig["layout"]["plot_bgcolor"] == "white"
    assert "template" not in fig["layout"] or fig["layout"]["template"] in (None, {})
    # the top margin holds the panel titles (one line each) and nothing else: the app kept TOOLBAR_PX for its toolbar
    assert original["layout"]["margin"]["t"] >= TOOLBAR_PX
    assert fig["layout"]["margin"]["t"] < TOOLBAR_PX
    assert fig["layout"]["margin"]["t"] >= 1.35 * FONT_PX


def test_weights_scale_is_colour_blind_safe_and_prints_in_greyscale() -> None:
    fig = spec(paper_figure(heads_figure(trace())))
    scale = fig["layout"]["coloraxis"]["colorscale"]
    assert [c.lower() for _, c in scale] == [c.lower() for c in reversed(pc.sequential.Viridis)]
    grey = [luminance(c) for _, c in scale]
    assert all(b < a for a, b in pairwise(grey)), f"lightness must fall monotonically: {grey}"
    assert grey[0] - grey[-1] > 0.6  # from near white to near black: weak and strong weights apart on a grey page
    assert fig["layout"]["coloraxis"]["cmin"] == 0


def test_signed_values_get_a_diverging_scale_darker_away_from_zero() -> None:
    t = trace()
    signed = t.weights - np.float32(0.5) * t.weights[::-1]  # differential attention's map1 - lambda * map2 has signs
    fig = spec(paper_figure(heads_figure(t, matrices=signed)))
    axis = fig["layout"]["coloraxis"]
    assert axis["cmin"] == -axis["cmax"] < 0
    grey = [luminance(c) for _, c in axis["colorscale"]]
    middle = len(grey) // 2
    assert all(a < b for a, b in pairwise(grey[:middle + 1])), grey  # up to 0: lighter
    assert all(a > b for a, b in pairwise(grey[middle:])), grey  # past 0: darker


def test_margins_hold_the_longest_token_labels() -> None:
    long_words = "a supercalifragilistic word and an extraordinarily long one"
    fig = spec(paper_figure(heads_figure(trace(long_words), heads=[0])))
    margin = fig["layout"]["margin"]
    for axis in axes(fig, "y"):
        if axis.get("showticklabels", True):
            assert margin["l"] >= max(text_px(t, axis["tickfont"]["size"]) for t in axis["ticktext"])
    for axis in axes(fig, "x"):
        if axis.get("showticklabels", True):
            assert axis["tickangle"] == -90  # 16-character labels of 10 tokens cannot stand side by side in 3.5 in
            assert margin["b"] >= max(text_px(t, axis["tickfont"]["size"]) for t in axis["ticktext"])
    assert max(len(t) for t in fig["layout"]["xaxis"]["ticktext"]) == 16  # the longest label was there to fit


def test_every_label_is_kept_when_there_is_room_and_thinned_when_there_is_not() -> None:
    small = spec(paper_figure(heads_figure(trace("The cat sat on the mat"), heads=[0, 1])))
    assert small["layout"]["yaxis"]["ticktext"] == ["The", "cat", "sat", "on", "the", "mat"]
    assert small["layout"]["xaxis"]["ticktext"] == ["The", "cat", "sat", "on", "the", "mat"]
    assert small["layout"]["meta"]["paper_label_step"] == 1
    many = " ".join(f"w{i}" for i in range(120))
    fig = spec(paper_figure(heads_figure(trace(many), heads=[0])))
    step = fig["layout"]["meta"]["paper_label_step"]
    assert step > 1
    layout = fig["layout"]
    area_h = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]
    assert layout["height"] <= 9 * 96  # at most a page's text height
    labels = len(layout["yaxis"]["ticktext"])
    assert area_h / labels >= 1.35 * FONT_PX - 1e-6  # one line a label: none overlaps its neighbour


def test_bad_columns_suffix_and_preset_are_refused_clearly(tmp_path) -> None:
    fig = heads_figure(trace())
    with pytest.raises(ValueError, match="columns must be 1 or 2"):
        paper_figure(fig, columns=3)
    with pytest.raises(ValueError, match=r"\.svg, \.pdf, \.png"):
        save_figure(fig, tmp_path / "heads.jpeg")
    with pytest.raises(ValueError, match="unknown preset 'poster'"):
        save_figure(fig, tmp_path / "heads.svg", preset="poster")
    assert [figure_format(f"a.{s}") for s in ("SVG", "pdf", "png")] == ["svg", "pdf", "png"]
    assert not list(tmp_path.iterdir())


def test_missing_kaleido_says_how_to_install_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "kaleido", None)  # import kaleido raises ImportError
    with pytest.raises(FigureExportError, match=r"pip install kaleido"):
        save_figure(heads_figure(trace()), tmp_path / "heads.pdf")
    assert not (tmp_path / "heads.pdf").exists()


def test_missing_chromium_says_how_to_install_it(tmp_path, monkeypatch) -> None:
    pytest.importorskip("kaleido")
    monkeypatch.delenv("BROWSER_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no browser on it
    with pytest.raises(FigureExportError, match=r"apt-get install chromium"):
        save_figure(heads_figure(trace()), tmp_path / "heads.svg")
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "nothing-here"))
    with pytest.raises(FigureExportError, match="not an executable"):
        chromium_path()


def test_cli_figure_refuses_a_bad_name_before_any_work(tmp_path, capsys, monkeypatch) -> None:
    from mha_viz.__main__ import main

    monkeypatch.chdir(tmp_path)
    assert main(["figure", "--text", "a b c"]) == 2
    assert "give --out heads.pdf" in capsys.readouterr().err
    assert main(["figure", "--text", "a b c", "--out", "heads.eps"]) == 2
    assert "must end in .svg, .pdf, .png" in capsys.readouterr().err
    (tmp_path / "heads.pdf").write_bytes(b"mine")
    assert main(["figure", "--text", "a b c", "--out", "heads.pdf"]) == 2
    assert "add --force" in capsys.readouterr().err
    assert (tmp_path / "heads.pdf").read_bytes() == b"mine"


def test_cli_figure_without_kaleido_says_how_to_install_it_in_one_line(tmp_path, capsys, monkeypatch) -> None:
    from mha_viz.__main__ import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "kaleido", None)
    assert main(["figure", "--text", "a b c", "--out", "heads.svg"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("python -m mha_viz figure: error: SVG, PDF and PNG files need kaleido") and "pip install" in err
    assert err.count("\n") == 1 and not list(tmp_path.iterdir())


def test_upright_key_labels_of_neighbouring_heads_stand_a_line_apart() -> None:
    fig = spec(paper_figure(heads_figure(trace("The animal didn't cross the street because it was too tired"))))
    layout, n = fig["layout"], 13  # tokens: positions 0..12, each axis spanning -0.5..12.5
    area_w = layout["width"] - layout["margin"]["l"] - layout["margin"]["r"]
    labelled = sorted((a for a in axes(fig, "x") if a.get("showticklabels", True)), key=lambda a: a["domain"][0])
    assert len(labelled) == 4 and all(a["tickangle"] == -90 for a in labelled)

    def px(axis: dict, value: float) -> float:
        x0, x1 = axis["domain"]
        return (x0 + (x1 - x0) * (value + 0.5) / n) * area_w

    for left, right in pairwise(labelled):
        assert px(right, right["tickvals"][0]) - px(left, left["tickvals"][-1]) >= 1.35 * FONT_PX
    assert labelled[-1]["ticktext"][-1] == "tired"  # the last panel has no neighbour: its last label stays

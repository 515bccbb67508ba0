"""Figures for a paper drawn for real: kaleido driving Debian's Chromium writes SVG, PDF and PNG; poppler's pdftoppm
renders the PDF. The SVG keeps every token label as text, and the PDF has the PNG's layout."""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import mha_viz
from harness.browser import CHROMIUM, require_tools
from mha_viz.__main__ import main
from mha_viz.figures import heads_figure
from mha_viz.figures.paper import COLUMN_PX, paper_figure
from mha_viz.paper import save_figure

require_tools({CHROMIUM: "chromium", "pdftoppm": "poppler-utils", "pdfinfo": "poppler-utils"})
pytest.importorskip("kaleido")

TOKENS = ["The", "cat", "sat", "on", "the", "warm", "mat"]
INK = 235  # a pixel darker than this in any channel is ink


@pytest.fixture(scope="module")
def figure():
    x = mha_viz.embed_tokens(TOKENS, 32)
    trace = mha_viz.MultiHeadAttention(32, 4, seed=0)(x, query_tokens=TOKENS)
    return heads_figure(trace, heads=[0, 1])


@pytest.fixture(scope="module")
def files(figure, tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("paper")
    out = {fmt: save_figure(figure, folder / f"heads.{fmt}") for fmt in ("svg", "pdf")}
    out["png"] = save_figure(figure, folder / "heads.png", dpi=96)  # one px a CSS px: the PDF rendered at 96 dpi
    return out


def svg_texts(path: Path) -> list[str]:
    root = ET.parse(path).getroot()
    return ["".join(node.itertext()).strip() for node in root.iter() if node.tag.split("}")[-1] == "text"]


def ink(image: Image.Image) -> np.ndarray:
    """A boolean mask of the image's non-white pixels (transparent counts as white)."""
    rgba = np.asarray(image.convert("RGBA"), dtype=np.int16)
    return (rgba[..., 3] > 0) & (rgba[..., :3].min(axis=-1) < INK)


def bbox(mask: np.ndarray) -> tuple[int, int, int, int]:
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    return int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1


def render_pdf(pdf: Path, dpi: int, out: Path) -> Path:
    subprocess.run(["pdftoppm", "-r", str(dpi), "-png", "-singlefile", str(pdf), str(out.with_suffix(""))],
                   check=True, timeout=60)
    return out


def test_svg_holds_every_token_label_as_text(files, figure) -> None:
    texts = svg_texts(files["svg"])
    laid_out = paper_figure(figure)
    for axis in ("xaxis", "yaxis"):
        assert list(laid_out.layout[axis].ticktext) == TOKENS  # the preset kept every label
    for token in TOKENS:
        # each query label once (left column), each key label under both heads; "the" and "The" are two tokens
        assert texts.count(token) == 3 * TOKENS.count(token), (token, texts)
    width = float(ET.parse(files["svg"]).getroot().get("width"))
    assert width == COLUMN_PX[1]  # 3.5 in at 96 px per inch


def test_pdf_opens_is_a_column_wide_and_keeps_the_labels_as_text(files) -> None:
    info = subprocess.run(["pdfinfo", str(files["pdf"])], capture_output=True, text=True, check=True, timeout=60).stdout
    pages = next(line for line in info.splitlines() if line.startswith("Pages:"))
    assert pages.split()[-1] == "1"
    size = next(line for line in info.splitlines() if line.startswith("Page size:")).split()
    assert float(size[2]) == pytest.approx(3.5 * 72, abs=1.5)  # 252 pt: one column of a two-column paper
    text = subprocess.run(["pdftotext", str(files["pdf"]), "-"], capture_output=True, text=True, check=True,
                          timeout=60).stdout
    assert all(token in text.split() for token in TOKENS)  # vector text, not a picture of it


def test_pdf_renders_with_the_pngs_layout(files, tmp_path) -> None:
    pdf = Image.open(render_pdf(files["pdf"], 96, tmp_path / "pdf.png"))
    png = Image.open(files["png"])
    assert abs(pdf.width / pdf.height - png.width / png.height) < 0.02 * png.width / png.height
    assert abs(pdf.width - png.width) <= 3 and abs(pdf.height - png.height) <= 3
    a, b = ink(pdf), ink(png.resize(pdf.size))
    assert a.mean() > 0.1  # the heatmaps are there
    for edge_a, edge_b in zip(bbox(a), bbox(b), strict=True):
        assert abs(edge_a - edge_b) <= 4, (bbox(a), bbox(b))
    iou = (a & b).sum() / (a | b).sum()
    assert iou > 0.8, iou


def test_cli_writes_a_pdf_for_a_paper(tmp_path, monkeypatch, capsys, assets) -> None:
    monkeypatch.chdir(tmp_path)
    text = "The animal didn't cross the street because it was too tired"
    assert main(["figure", "--text", text, "--heads", "4", "--out", "heads.pdf"]) == 0
    assert "wrote heads.pdf" in capsys.readouterr().out
    assert (tmp_path / "heads.pdf").read_bytes().startswith(b"%PDF-")
    picture = Image.open(render_pdf(tmp_path / "heads.pdf", 200, tmp_path / "heads.png"))
    assert picture.width == pytest.approx(3.5 * 200, abs=3)
    shutil.copyfile(tmp_path / "heads.png", assets / "paper-figure.png")  # the README's picture with --update-assets


def test_the_apps_pdf_download_is_the_heads_grid_for_a_paper(server: str, browser, tmp_path) -> None:
    from tests.browser.test_browser_views import new_page, settle

    page = new_page(browser, accept_downloads=True)
    try:
        page.goto(f"{server}/?h=2&text=The+cat+sat+on+the+mat")
        settle(page)
        page.get_by_text("Export and share").click()
        button = page.get_by_role("button", name="Figure for a paper (.pdf)")
        button.wait_for(timeout=60_000)
        # the expander's rerun has ended: a click during it hits a button about to be replaced
        page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000)
        with page.expect_download(timeout=120_000) as info:
            button.click()
        download = info.value
        assert download.suggested_filename.endswith("-heads.pdf")
        pdf = tmp_path / "app.pdf"
        download.save_as(pdf)
    finally:
        assert page.errors == []
        page.close()
    assert pdf.read_bytes().startswith(b"%PDF-")
    info_text = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True, timeout=60).stdout
    size = next(line for line in info_text.splitlines() if line.startswith("Page size:")).split()
    assert float(size[2]) == pytest.approx(3.5 * 72, abs=1.5)
    words = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True, timeout=60).stdout
    assert {"cat", "sat", "mat"} <= set(words.split()) and "head" in words

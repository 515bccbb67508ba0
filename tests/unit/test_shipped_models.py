"""The long-context models this project trains and ships (recall-16k, hybrid-2l): each folder holds exactly the files
its script writes, is small package data, has the weights' recorded sha256, and a changed weight is refused."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

import mha_viz
from mha_viz.pretrained import HYBRID_MODEL, RECALL_MODEL, load_model, loading
from mha_viz.training.recall import GENERATED_FILES

MODELS = (RECALL_MODEL, HYBRID_MODEL)  # induction-2l: tests/unit/test_induction_model.py (its own files)


@pytest.mark.parametrize("name", MODELS)
def test_the_weights_have_the_recorded_sha256_and_the_folder_is_small_package_data(name: str) -> None:
    folder = loading.shipped_model_dir(name)
    assert folder == Path(mha_viz.__file__).parent / "models" / name.split("/")[1]
    assert loading.file_sha256(folder / "model.safetensors") == loading.SHIPPED_MODELS[name][0]
    assert {f.name for f in folder.iterdir()} == {*GENERATED_FILES, "README.md"}
    assert sum(f.stat().st_size for f in folder.iterdir()) < 1_500_000
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["mha_viz"]
    assert all(any(Path("mha_viz", file).match(f"mha_viz/{p}") for p in patterns)
               for file in (f"models/{folder.name}/{f}" for f in (*GENERATED_FILES, "README.md")))


@pytest.mark.parametrize("name", MODELS)
def test_changed_weights_are_refused(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / name.split("/")[1]
    shutil.copytree(loading.shipped_model_dir(name), copy)
    weights = bytearray((copy / "model.safetensors").read_bytes())
    weights[-1] ^= 1
    (copy / "model.safetensors").write_bytes(bytes(weights))
    monkeypatch.setattr(loading, "shipped_model_dir", lambda _: copy)
    with pytest.raises(mha_viz.pretrained.ModelIntegrityError, match=f"expected {loading.SHIPPED_MODELS[name][0]}"):
        load_model(name)

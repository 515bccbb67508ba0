"""A cached model whose config.json is not valid JSON: the app says the config is corrupt, with its path and the JSON
error, not that the model is missing from the cache."""

from __future__ import annotations

from tests.app.test_app import new_app
from tests.unit.test_pretrained import corrupt_hub_cache


def test_a_corrupt_cached_config_is_named_in_the_app(tmp_path, monkeypatch) -> None:
    name, path = corrupt_hub_cache(tmp_path, monkeypatch)
    at = new_app(mode="Pretrained", model=name).run()
    errors = " ".join(e.value for e in at.main.error).replace("\\", "")  # markdown escapes out
    assert not at.exception
    assert f"its config {path} is corrupt (JSONDecodeError: Expecting property name" in errors.replace("\\", "")
    assert "not in the cache" not in errors and "could not be downloaded" not in errors

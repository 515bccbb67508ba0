"""mha-viz serve: the console script's command that starts the app the package carries (mha_viz/ui/app: app.py,
page.py and .streamlit/config.toml, in a checkout links to the root's), with a clear message without Streamlit.
The installed wheel's serve: tests/unit/test_wheel.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import mha_viz.__main__ as cli
from mha_viz.__main__ import APP_SCRIPT, main, serve_command

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_carries_the_apps_scripts_and_settings() -> None:
    folder = APP_SCRIPT.parent
    assert folder == ROOT / "mha_viz" / "ui" / "app"
    for name in ("app.py", "page.py", ".streamlit/config.toml"):
        assert (folder / name).read_bytes() == (ROOT / name).read_bytes(), name


@pytest.fixture
def no_address_set(tmp_path, monkeypatch) -> Path:
    """No server.address anywhere Streamlit would read one: a home and a current folder without config.toml, and no
    STREAMLIT_SERVER_ADDRESS. Yields the home folder."""
    home = tmp_path / "home"
    (tmp_path / "work").mkdir()
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.delenv("STREAMLIT_SERVER_ADDRESS", raising=False)
    return home


def test_serve_runs_streamlit_on_the_packaged_app_on_this_machine_only(no_address_set) -> None:
    command = serve_command(["--server.port", "8080"])
    assert command == [sys.executable, "-m", "streamlit", "run", str(APP_SCRIPT),
                       "--server.address", "127.0.0.1", "--server.port", "8080"]


@pytest.mark.parametrize("options", [["--server.address", "0.0.0.0"], ["--server.address=0.0.0.0"],
                                     ["--server.port", "8080", "--server.address", "192.0.2.7"]])
def test_serve_keeps_the_address_the_user_gives(no_address_set, options) -> None:
    command = serve_command(options)
    assert command == [sys.executable, "-m", "streamlit", "run", str(APP_SCRIPT), *options]
    assert "127.0.0.1" not in command


def test_serve_keeps_an_address_set_in_the_environment_or_a_config_file(no_address_set, monkeypatch) -> None:
    plain = [sys.executable, "-m", "streamlit", "run", str(APP_SCRIPT)]
    monkeypatch.setenv("STREAMLIT_SERVER_ADDRESS", "0.0.0.0")
    assert serve_command([]) == plain
    monkeypatch.delenv("STREAMLIT_SERVER_ADDRESS")
    for folder in (no_address_set, Path.cwd()):  # the user's ~/.streamlit, then the current folder's
        config = folder / ".streamlit" / "config.toml"
        config.parent.mkdir()
        config.write_text('[server]\nport = 8080\n')  # no address: still this machine only
        assert serve_command([])[-2:] == ["--server.address", "127.0.0.1"]
        config.write_text('[server]\naddress = "0.0.0.0"\n')
        assert serve_command([]) == plain
        config.unlink()
        config.parent.rmdir()
    bad = Path.cwd() / ".streamlit" / "config.toml"
    bad.parent.mkdir()
    bad.write_text("[server\naddress = ")  # not TOML: Streamlit reports it; serve still binds locally
    assert serve_command([])[-2:] == ["--server.address", "127.0.0.1"]


def test_serve_without_streamlit_says_which_extra_to_install(monkeypatch, capsys) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(cli.importlib.util, "find_spec",
                        lambda name, *args: None if name == "streamlit" else real(name, *args))
    assert main(["serve"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert err.strip() == 'python -m mha_viz serve: error: the app needs Streamlit, which is not installed: ' \
                          'pip install "mha-viz[app]"'


def test_serve_becomes_the_server(no_address_set, monkeypatch) -> None:
    """The process is replaced by `streamlit run` (a signal to it reaches the server, no orphan is left)."""
    calls = []
    monkeypatch.setattr(cli.os, "execv", lambda path, args: calls.append((path, args)))
    main(["serve", "--server.port", "8080"])
    assert calls == [(sys.executable, serve_command(["--server.port", "8080"]))]


def test_other_commands_still_refuse_unknown_options(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["report", "--out", "x.html", "--server.port", "8080"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --server.port 8080" in capsys.readouterr().err

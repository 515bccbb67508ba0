"""python -m mha_viz report: outputs (no overwriting without --force, no symbolic links, no duplicate paths,
no half-written files), the app's size limits checked before any work, and one-line errors for memory,
runtime failures and interrupts. The CLI's first tests (files it writes, argument errors) are in test_export.py."""

from __future__ import annotations

import errno
import io
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import mha_viz.export
import mha_viz.sources
from mha_viz.__main__ import main
from mha_viz.config import MHAConfig
from mha_viz.export import trace_from_json, trace_from_npz
from mha_viz.limits import MAX_TOKENS
from tests.unit.test_export import ROOT, assert_one_line_error, assert_same_trace, run_cli

SMALL = ("--text", "the cat sat", "--heads", "2", "--d-model", "8")


@pytest.fixture
def here(tmp_path: Path, monkeypatch) -> Path:
    """A fresh working folder for an in-process run of the CLI."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def no_work(monkeypatch) -> None:
    """Tracing fails the test: a refusal must come before any work."""
    def traced(*args, **kwargs):
        raise AssertionError("the layer was traced before the arguments were checked")

    monkeypatch.setattr(mha_viz.sources, "configurable_trace", traced)


def refused(capsys, args: tuple[str, ...], message: str, code: int = 2) -> None:
    assert main(["report", *args]) == code
    out, err = capsys.readouterr()
    assert out == ""
    assert_one_line_error(err, message)


def leftovers(folder: Path) -> list[str]:
    """Temporary files a write left behind."""
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".part"))


# ------------------------------------------------------------------------------------------ overwriting


@pytest.mark.parametrize("option", ["--out", "--npz", "--json"])
def test_an_existing_file_is_kept_without_force(here: Path, capsys, no_work, option: str) -> None:
    (here / "old").write_text("keep me")
    refused(capsys, (*SMALL, option, "old"), f"{option} old exists; add --force to overwrite")
    assert (here / "old").read_text() == "keep me"


def test_an_existing_folder_or_fifo_is_refused_even_with_force(here: Path, capsys, no_work) -> None:
    (here / "folder").mkdir()
    os.mkfifo(here / "fifo")
    for name in ("folder", "fifo"):
        refused(capsys, (*SMALL, "--out", name), "exists; add --force")
        refused(capsys, (*SMALL, "--out", name, "--force"), "is not a regular file; --force replaces regular files only")
    assert (here / "folder").is_dir() and stat.S_ISFIFO(os.lstat(here / "fifo").st_mode)


def test_force_replaces_the_file_and_not_what_else_links_to_it(here: Path, capsys) -> None:
    (here / "t.npz").write_bytes(b"old")
    os.link(here / "t.npz", here / "other-name")  # a hard link: same file, second name
    assert main(["report", *SMALL, "--npz", "t.npz", "--force"]) == 0
    assert "wrote t.npz" in capsys.readouterr().out
    assert trace_from_npz((here / "t.npz").read_bytes()).weights.shape == (2, 3, 3)
    assert (here / "other-name").read_bytes() == b"old"  # a new file took the name; the old one was not written
    assert leftovers(here) == []


def test_new_files_get_the_usual_permissions(here: Path, capsys) -> None:
    before = os.umask(0o027)
    try:
        assert main(["report", *SMALL, "--out", "r.html", "--json", "t.json"]) == 0
    finally:
        os.umask(before)
    for name in ("r.html", "t.json"):
        assert stat.S_IMODE(os.stat(here / name).st_mode) == 0o640  # 0o666 less the umask, not a temp file's 0o600


# ------------------------------------------------------------------------------------------ symbolic links


@pytest.mark.parametrize("force", [False, True])
def test_a_symbolic_link_is_never_followed(here: Path, capsys, no_work, force: bool) -> None:
    (here / "target.txt").write_text("secret")
    (here / "link.html").symlink_to("target.txt")
    (here / "dangling.json").symlink_to("missing-target")
    for option, name in (("--out", "link.html"), ("--json", "dangling.json")):
        refused(capsys, (*SMALL, option, name, *(["--force"] if force else [])),
                f"{option} {name} is a symbolic link; outputs are never written through links")
    assert (here / "target.txt").read_text() == "secret"
    assert not (here / "missing-target").exists()
    assert os.readlink(here / "link.html") == "target.txt" and os.readlink(here / "dangling.json") == "missing-target"


@pytest.mark.parametrize("force", [False, True])
def test_a_link_made_while_the_layer_is_traced_is_not_written_through(here: Path, capsys, monkeypatch,
                                                                       force: bool) -> None:
    """The check and the write are apart in time; the write itself never follows a link either."""
    (here / "target.txt").write_text("secret")
    trace_text = mha_viz.sources.configurable_trace

    def trace_and_plant_a_link(*args, **kwargs):
        (here / "r.html").symlink_to("target.txt")
        return trace_text(*args, **kwargs)

    monkeypatch.setattr(mha_viz.sources, "configurable_trace", trace_and_plant_a_link)
    code = main(["report", *SMALL, "--out", "r.html", *(["--force"] if force else [])])
    err = capsys.readouterr().err
    assert (here / "target.txt").read_text() == "secret"
    if force:  # os.replace swaps the link itself for the report
        assert code == 0 and not (here / "r.html").is_symlink() and "<!DOCTYPE html>" in (here / "r.html").read_text()
    else:  # the hard link that gives the report its name fails: the name is taken
        assert code == 2 and (here / "r.html").is_symlink()
        assert_one_line_error(err, "r.html exists (created while this ran); add --force to overwrite")
    assert leftovers(here) == []


# ------------------------------------------------------------------------------------------ duplicate paths


def test_two_outputs_with_one_path_are_refused(here: Path, capsys, no_work) -> None:
    (here / "real").mkdir()
    for args, message in [
        (("--out", "a", "--npz", "a"), "--npz and --out name the same file a"),
        (("--out", "a", "--json", "./a"), "--json and --out name the same file a"),
        (("--npz", "real/x", "--json", "real/../real/x"), "--npz and --json name the same file"),
    ]:
        refused(capsys, (*SMALL, *args, "--force"), message)
    assert sorted(p.name for p in here.iterdir()) == ["real"] and not any((here / "real").iterdir())


@pytest.mark.parametrize("force", [False, True])
def test_outputs_through_a_linked_folder_are_refused(here: Path, capsys, no_work, force: bool) -> None:
    """Like a linked file: a folder on the output's path that is a link is refused, and the real path is named."""
    (here / "real" / "sub").mkdir(parents=True)
    (here / "via-link").symlink_to("real")
    for option, name in (("--npz", "via-link/t.npz"), ("--json", "via-link/sub/t.json"),
                         ("--out", str(here / "via-link" / "r.html"))):
        refused(capsys, (*SMALL, option, name, *(["--force"] if force else [])),
                f"{option} {name} goes through the symbolic link")
    assert main(["report", *SMALL, "--npz", "via-link/t.npz"]) == 2
    assert f"give the real path ({here / 'real' / 't.npz'})" in capsys.readouterr().err
    assert not any((here / "real").rglob("*.*"))  # nothing written in the real folder


def test_a_folder_swapped_for_a_link_while_the_layer_is_traced_is_not_written_through(here: Path, capsys,
                                                                                      monkeypatch) -> None:
    (here / "out").mkdir()
    (here / "elsewhere").mkdir()
    trace_text = mha_viz.sources.configurable_trace

    def trace_and_swap(*args, **kwargs):
        (here / "out").rmdir()
        (here / "out").symlink_to("elsewhere")
        return trace_text(*args, **kwargs)

    monkeypatch.setattr(mha_viz.sources, "configurable_trace", trace_and_swap)
    assert main(["report", *SMALL, "--npz", "out/t.npz"]) == 2
    assert "goes through the symbolic link out" in capsys.readouterr().err
    assert list((here / "elsewhere").iterdir()) == []


# ------------------------------------------------------------------------------------------ size limits


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--heads", "4096", "--d-model", "4096"), "--heads must be at most 16, the app's limit; got 4096"),
        (("--d-model", "65536", "--heads", "1"), "--d-model must be at most 768, the app's limit; got 65536"),
        (("--heads", "17", "--d-model", "68"), "--heads must be at most 16"),
        (("--d-model", "769",), "--d-model must be at most 768"),
        (("--d-k", "257",), "--d-k must be at most 256"),
        (("--d-v", "100000",), "--d-v must be at most 256"),
        (("--d-out", "768", "--d-model", "768"), "--d-out must be at most 256, the app's limit (leave it out for d_out"),
    ],
)
def test_sizes_beyond_the_apps_limits_are_refused_before_any_work(here: Path, capsys, no_work, args, message) -> None:
    refused(capsys, (*args, "--out", "r.html"), message)
    assert list(here.iterdir()) == []


@pytest.mark.slow
def test_the_largest_layer_within_the_limits_is_written(here: Path, capsys) -> None:
    text = " ".join(f"w{i}" for i in range(MAX_TOKENS + 10))
    args = ["--text", text, "--context", text, "--heads", "16", "--d-model", "768", "--d-k", "256", "--d-v", "256",
            "--d-out", "256"]
    assert main(["report", *args, "--npz", "t.npz"]) == 0
    err = capsys.readouterr().err
    assert "only the first 512 are used" in err and "Traceback" not in err
    trace = trace_from_npz((here / "t.npz").read_bytes())
    assert trace.weights.shape == (16, 512, 512) and trace.queries.shape == (16, 512, 256)
    assert trace.output.shape == (512, 256) and trace.W_Q.shape == (16, 768, 256)


@pytest.mark.slow
def test_a_pretrained_model_traces_at_most_512_tokens(tmp_path: Path) -> None:
    """A model that takes 1024 positions still gives the CLI 512 tokens at most, as the app's layer."""
    from transformers import AutoModel, AutoTokenizer, GPT2Config

    from mha_viz.pretrained import bundled_model_dir

    folder = tmp_path / "long-gpt2"
    config = GPT2Config(vocab_size=30522, n_embd=16, n_layer=1, n_head=2, n_positions=1024, bos_token_id=101,
                        eos_token_id=102)
    AutoModel.from_config(config).save_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    tokenizer.model_max_length = 1024
    tokenizer.save_pretrained(folder)
    text = " ".join(["cat"] * 700)
    done = run_cli("report", "--model", str(folder), "--text", text, "--npz", "t.npz", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "maximum of 512 tokens" in done.stderr and "Traceback" not in done.stderr
    assert trace_from_npz((tmp_path / "t.npz").read_bytes()).weights.shape == (2, 512, 512)


# ------------------------------------------------------------------------------------------ one-line errors


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (MemoryError(), "out of memory: try fewer heads, a smaller d_model or a shorter text"),
        (RuntimeError("[enforce fail at alloc_cpu.cpp:118] data. DefaultCPUAllocator: not enough memory: "
                      "you tried to allocate 17179869184 bytes."), "out of memory: try fewer heads"),
        (RuntimeError("mat1 and mat2 shapes cannot be multiplied (3x8 and 9x8)"), "error: mat1 and mat2 shapes"),
        (TypeError("unsupported operand\ntype(s)"), "error: unexpected TypeError: unsupported operand type(s)"),
    ],
)
def test_memory_and_runtime_errors_are_one_line(here: Path, capsys, monkeypatch, error: Exception, message: str) -> None:
    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(mha_viz.sources, "configurable_trace", fail)
    refused(capsys, (*SMALL, "--out", "r.html"), message, code=1)
    assert list(here.iterdir()) == []


@pytest.mark.slow
def test_a_real_allocation_failure_is_one_line(tmp_path: Path) -> None:
    """The largest layer within the limits, in a process allowed 64 MB more address space than it has
    after its imports: torch's allocator fails (DefaultCPUAllocator: can't allocate memory)."""
    code = f"""
import resource, sys
import torch
import mha_viz.__main__, mha_viz.attention, mha_viz.config, mha_viz.export, mha_viz.sources, mha_viz.text
torch.set_num_threads(1)
size = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmSize")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + (64 << 20), size + (64 << 20)))
text = " ".join(f"w{{i}}" for i in range({MAX_TOKENS}))
sys.exit(mha_viz.__main__.main(["report", "--text", text, "--context", text, "--heads", "16", "--d-model", "768",
                                "--d-k", "256", "--d-v", "256", "--npz", "t.npz"]))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], check=False, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 1, done.stderr
    assert_one_line_error(done.stderr, "out of memory: try fewer heads, a smaller d_model or a shorter text")
    assert list(tmp_path.iterdir()) == []


def test_an_interrupt_leaves_no_file_behind(here: Path, capsys, monkeypatch) -> None:
    def write_then_interrupt(trace, file, **kwargs):
        file.write(b"{ half a document")
        raise KeyboardInterrupt

    monkeypatch.setattr(mha_viz.export, "write_json", write_then_interrupt)
    assert main(["report", *SMALL, "--npz", "t.npz", "--json", "t.json"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "python -m mha_viz report: interrupted"
    assert sorted(p.name for p in here.iterdir()) == ["t.npz"]  # written before; no half JSON, no temporary file


def test_a_full_disk_leaves_no_file_behind(here: Path, capsys, monkeypatch) -> None:
    def write_until_full(trace, file, **kwargs):
        file.write(b"PK\x03\x04")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(mha_viz.export, "write_npz", write_until_full)
    refused(capsys, (*SMALL, "--npz", "t.npz"), "could not write t.npz: No space left on device", code=1)
    assert list(here.iterdir()) == []


def test_without_hard_links_a_new_file_is_still_written_and_an_existing_one_kept(here: Path, capsys,
                                                                                 monkeypatch) -> None:
    """File systems without hard links (FAT, some network shares): an exclusive create takes the name."""
    def no_link(src, dst, **kwargs):
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(os, "link", no_link)
    assert main(["report", *SMALL, "--json", "t.json"]) == 0
    assert trace_from_json((here / "t.json").read_bytes()).weights.shape == (2, 3, 3)
    trace_text = mha_viz.sources.configurable_trace

    def trace_and_take_the_name(*args, **kwargs):
        (here / "u.json").write_text("someone else's")
        return trace_text(*args, **kwargs)

    monkeypatch.setattr(mha_viz.sources, "configurable_trace", trace_and_take_the_name)
    capsys.readouterr()
    refused(capsys, (*SMALL, "--json", "u.json"), "u.json exists (created while this ran)")
    assert (here / "u.json").read_text() == "someone else's" and leftovers(here) == []


# ------------------------------------------------------------------------------------------ long names

NAME_MAX = os.pathconf(".", "PC_NAME_MAX") if hasattr(os, "pathconf") else 255
# names of exactly NAME_MAX bytes: ASCII, and two-byte UTF-8 characters (fewer characters than bytes)
LONGEST = {"ascii": "r" * (NAME_MAX - 5) + ".html", "utf-8": "é" * ((NAME_MAX - 5) // 2) + "r" * ((NAME_MAX - 5) % 2) + ".html"}


@pytest.mark.parametrize("kind", sorted(LONGEST))
def test_a_name_of_the_longest_length_the_file_system_takes_is_written(here: Path, capsys, kind: str) -> None:
    name = LONGEST[kind]
    assert len(os.fsencode(name)) == NAME_MAX == os.pathconf(here, "PC_NAME_MAX")
    assert main(["report", *SMALL, "--out", name, "--json", name[:-5] + ".json"]) == 0  # as long: .json, .html
    assert f"wrote {name}" in capsys.readouterr().out
    assert (here / name).read_bytes().startswith(b"<!DOCTYPE html") and leftovers(here) == []
    assert main(["report", *SMALL, "--out", name, "--force"]) == 0  # replacing it takes the same short temporary file
    assert leftovers(here) == [] and sorted(os.listdir(here)) == sorted([name, name[:-5] + ".json"])


def test_a_figure_with_the_longest_name_is_written(here: Path, capsys, monkeypatch) -> None:
    import mha_viz.paper

    monkeypatch.setattr(mha_viz.paper, "figure_bytes", lambda fig, fmt, **kwargs: b"<svg/>")  # kaleido not needed
    name = "é" * ((NAME_MAX - 4) // 2) + "f" * ((NAME_MAX - 4) % 2) + ".svg"
    assert len(os.fsencode(name)) == NAME_MAX
    assert main(["figure", *SMALL, "--out", name]) == 0
    assert (here / name).read_bytes() == b"<svg/>" and leftovers(here) == []


@pytest.mark.parametrize("name", ["r" * (NAME_MAX - 4) + ".html", "é" * (NAME_MAX - 5) + ".html"],
                         ids=["one byte over", "as many characters, twice the bytes"])
def test_a_name_over_the_limit_is_refused_in_one_line_before_any_work(here: Path, capsys, no_work, name: str) -> None:
    size = len(os.fsencode(name))
    refused(capsys, (*SMALL, "--out", name), f"--out: the file name {name[:20]}...{name[-12:]} is {size} bytes long "
            f"(UTF-8), more than the {NAME_MAX} its folder's file system allows: give a shorter name")
    assert list(here.iterdir()) == []
    assert main(["figure", *SMALL, "--out", name[:-5] + "x.svg"]) == 2  # as long
    assert "bytes long (UTF-8), more than the" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ stated dtypes


def test_float16_and_base64_are_what_the_files_say(here: Path, capsys) -> None:
    args = [*SMALL, "--causal", "--npz", "t.npz", "--json", "t.json", "--float16"]
    assert main(["report", *args]) == 0
    assert main(["report", *args[:-5], "--json", "b.json", "--json-arrays", "base64"]) == 0
    full = mha_viz.sources.configurable_trace("the cat sat", MHAConfig(8, 2), causal=True)
    half = trace_from_npz((here / "t.npz").read_bytes())
    assert half.weights.dtype == np.float16 and half.weights.shape == full.weights.shape
    np.testing.assert_array_equal(half.scores, full.scores.astype(np.float16))  # -inf kept
    assert_same_trace(half, trace_from_json((here / "t.json").read_bytes()))
    assert_same_trace(full, trace_from_json((here / "b.json").read_bytes()))  # base64: exact float32
    with np.load(io.BytesIO((here / "t.npz").read_bytes())) as npz:
        assert npz["W_O"].dtype == np.float16

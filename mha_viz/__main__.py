"""Command line: mha-viz report ... (or python -m mha_viz report ...), mha-viz serve

    mha-viz serve                                    # the Streamlit app on http://127.0.0.1:8501 (this machine only)
    mha-viz serve --server.port 8080                 # options after serve go to `streamlit run`
    mha-viz serve --server.address 0.0.0.0           # every interface: other machines can connect

    python -m mha_viz report --text "The cat sat on the mat" --heads 8 --d-model 64 --out report.html
    python -m mha_viz report --text "..." --context "second sentence" --causal --npz trace.npz --json trace.json
    python -m mha_viz report --model bundled --layer 2 --text "The cat sat on the mat" --out report.html
    python -m mha_viz report --model org/name --part decoder --layer 0 --text "..." --out report.html
    python -m mha_viz figure --model bundled --layer 2 --text "The cat sat on the mat" --out heads.pdf

Outputs are never overwritten without --force, never written through a symbolic link (a link is
refused, even with --force, as is a path through a linked folder), and never half-written: each file is written to a temporary file
in its directory (a short name, so any name the file system takes works) and then moved into place (a hard link that fails if the name exists, or
os.replace with --force). The sizes have the app's limits (h, d_model, d_k, d_v, d_out; at most
512 tokens a side, pretrained models included), checked before any work.

Exit codes: 0 written; 1 the model could not be loaded, memory ran out or a file was not written;
2 invalid arguments (the message says which and why); 3 the trace's self-check against the model's
own numbers failed (mha_viz.checks: the message gives each difference and its tolerance; nothing is
written unless --allow-failed-check, and the status stays 3 with it); 130 interrupted. Errors are one
line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import errno
import importlib.util
import os
import shlex
import stat
import subprocess
import sys
import tempfile
import tomllib
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from .checks import TraceCheckWarning, failure_message
from .limits import D_MODEL_CHOICES, MAX_HEAD_WIDTH, MAX_HEADS, MAX_SEED, MAX_TOKENS
from .text import DEFAULT_TEXT, tokenize
from .trace import AttentionTrace

PROG = "mha-viz" if sys.argv and Path(sys.argv[0]).stem == "mha-viz" else "python -m mha_viz"  # the console script
# The app's entry scripts as the package carries them (in a checkout, links to app.py, page.py and .streamlit/)
APP_SCRIPT = Path(__file__).resolve().parent / "ui" / "app" / "app.py"
LOCAL_ADDRESS = "127.0.0.1"  # `mha-viz serve` listens here unless told otherwise: this machine only
CONFIGURABLE_OPTIONS = ("heads", "d_model", "d_k", "d_v", "d_out", "seed", "causal", "no_pe")
PRETRAINED_OPTIONS = ("layer", "part")
OUTPUTS = ("npz", "json", "out")  # in the order they are written
# The app's limits (mha_viz.limits): the largest layer within them traces in about a second.
LIMITS = {"heads": MAX_HEADS, "d_model": max(D_MODEL_CHOICES), "d_k": MAX_HEAD_WIDTH, "d_v": MAX_HEAD_WIDTH,
          "d_out": MAX_HEAD_WIDTH}
TEMP_PREFIX = ".mha-viz-"  # the temporary file's name: this, 8 random characters and .part
FAILED_CHECK = 3  # exit status: the trace's self-check against the model failed
_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.EXDEV}


class CliError(Exception):
    """A problem to report in one line; code 2 = bad arguments, 1 = could not load or write, 3 = a failed
    self-check."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def _trace_options(command: argparse.ArgumentParser) -> None:
    """The options that pick the layer to trace: the text, the configurable layer's sizes or a pretrained model."""
    command.add_argument("--text", default=DEFAULT_TEXT, help="the input sentence (default: %(default)r)")
    command.add_argument("--context", help="configurable: a second sentence for cross-attention (keys and values); "
                        "encoder-decoder models: the decoder text")
    group = command.add_argument_group("configurable layer (without --model)")
    group.add_argument("--heads", "-H", type=int, help="number of heads h (default 4)")
    group.add_argument("--d-model", type=int, help="model width d_model (default 64)")
    group.add_argument("--d-k", type=int, help="query/key width per head (default d_model / h)")
    group.add_argument("--d-v", type=int, help="value width per head (default d_model / h)")
    group.add_argument("--d-out", type=int, help="output width after W_O (default d_model)")
    group.add_argument("--seed", type=int, help="seed of the weights and token vectors (default 0)")
    group.add_argument("--causal", action="store_true", default=None, help="mask future tokens")
    group.add_argument("--no-pe", action="store_true", default=None, help="no sinusoidal positional encoding")
    group = command.add_argument_group("pretrained model")
    group.add_argument("--model", help="'bundled' (all-MiniLM-L6-v2, offline), a Hugging Face id org/name, or a folder")
    group.add_argument("--layer", type=int, help="layer number, from 0 (default 0)")
    group.add_argument("--part", choices=("encoder", "decoder", "cross"), help="attention to trace (default: the model's first)")
    group.add_argument("--allow-failed-check", action="store_true",
                       help="write the outputs even when the trace's self-check against the model's own numbers fails "
                       "(the exit status is still 3)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="mha-viz: multi-head attention made visible.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    report = commands.add_parser(
        "report",
        help="trace one attention layer and write an offline HTML report (and/or NPZ / JSON)",
        description="Trace one attention layer on a text and write a self-contained HTML report that opens "
        "offline, and/or the trace's arrays as NPZ or JSON. Without --model: the configurable layer "
        "(random weights, seeded). With --model: a pretrained model's layer.",
    )
    _trace_options(report)
    group = report.add_argument_group("output (at least one)")
    group.add_argument("--out", type=Path, help="HTML report file")
    group.add_argument("--npz", type=Path, help="the trace's arrays as .npz (numpy)")
    group.add_argument("--json", type=Path, help="the trace as JSON")
    group.add_argument("--title", help="the report's title (default: describes the layer)")
    group.add_argument("--force", action="store_true", help="overwrite existing files (regular files only; "
                       "a symbolic link is never followed nor replaced)")
    group.add_argument("--float16", action="store_true", help="store the arrays of --npz and --json as float16: "
                       "half the size, about 3 significant digits; refused if a value exceeds float16's range")
    group.add_argument("--json-arrays", choices=("lists", "base64"), default="lists",
                       help="--json arrays as nested lists of numbers (default) or as base64 of their "
                       "little-endian bytes (exact, about 2.2 times smaller, much faster to write)")
    commands.add_parser(
        "serve",
        help="start the Streamlit app (needs the app extra: pip install \"mha-viz[app]\")",
        description="Start the Streamlit app on http://127.0.0.1:8501, reachable from this machine only. Options "
        "after serve go to `streamlit run` (e.g. --server.port 8080). --server.address 0.0.0.0 (or a server.address "
        "in a Streamlit config.toml, or STREAMLIT_SERVER_ADDRESS) serves other machines too: a public demo goes "
        "behind the shipped nginx configuration (README, Hosting a public demo).",
    )
    figure = commands.add_parser(
        "figure",
        help="trace one attention layer and write its heads as a figure for a paper (.svg, .pdf or .png)",
        description="Trace one attention layer, as `report` does, and write every head's attention as a vector "
        "figure (SVG or PDF) or a 300 dpi PNG, laid out for print (the paper preset: a column wide, 8 pt fonts, "
        "a colour scale that prints in greyscale). Needs kaleido and a Chromium (mha_viz.paper).",
    )
    _trace_options(figure)
    group = figure.add_argument_group("output")
    group.add_argument("--out", type=Path, help="the figure: its suffix (.svg, .pdf, .png) says the format")
    group.add_argument("--columns", type=int, choices=(1, 2), default=1,
                       help="1: one column of a two-column paper, 3.5 in wide (default); 2: the text width, 7 in")
    group.add_argument("--preset", choices=("paper", "none"), default="paper",
                       help="paper (default) or none: the figure as the library draws it for a screen")
    group.add_argument("--title", help="a title in the figure (default: none; a paper's caption says it)")
    group.add_argument("--force", action="store_true", help="overwrite an existing file (a regular file only)")
    figure.set_defaults(npz=None, json=None)
    return parser


def serve_command(options: list[str]) -> list[str]:
    """The `streamlit run` command of the app the package carries, with options for Streamlit; on 127.0.0.1 (this
    machine only) unless an address is chosen (the option, STREAMLIT_SERVER_ADDRESS or a config.toml)."""
    if importlib.util.find_spec("streamlit") is None:
        raise CliError('the app needs Streamlit, which is not installed: pip install "mha-viz[app]"', code=1)
    if not APP_SCRIPT.is_file():
        raise CliError(f"the app's script {APP_SCRIPT} is missing: reinstall mha-viz", code=1)
    local = [] if _address_chosen(options) else ["--server.address", LOCAL_ADDRESS]
    return [sys.executable, "-m", "streamlit", "run", str(APP_SCRIPT), *local, *options]


def _address_chosen(options: list[str]) -> bool:
    """Whether the user chose the server's address: --server.address [=]X among the options, the environment's
    STREAMLIT_SERVER_ADDRESS, or server.address in a config.toml Streamlit reads from the user's or the current
    folder (Streamlit itself reports a file it cannot parse)."""
    if any(option == "--server.address" or option.startswith("--server.address=") for option in options):
        return True
    if os.environ.get("STREAMLIT_SERVER_ADDRESS"):
        return True
    for config in (Path.home() / ".streamlit" / "config.toml", Path.cwd() / ".streamlit" / "config.toml"):
        try:
            if tomllib.loads(config.read_text(encoding="utf-8")).get("server", {}).get("address"):
                return True
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, AttributeError):
            continue
    return False


def serve(options: list[str]) -> int:
    """Run the app: this process becomes the server (Ctrl-C and SIGTERM reach Streamlit itself); on Windows, which
    has no exec, the server is a child process and its exit code is returned."""
    command = serve_command(options)
    if os.name != "posix":
        return subprocess.call(command)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)


def _one_line(message: object) -> str:
    return " ".join(str(message).split())


def _check_options(args: argparse.Namespace) -> None:
    if args.out is None and args.npz is None and args.json is None:
        raise CliError("nothing to write: give --out report.html, --npz trace.npz and/or --json trace.json")
    wrong = CONFIGURABLE_OPTIONS if args.model else PRETRAINED_OPTIONS
    given = [f"--{name.replace('_', '-')}" for name in wrong if getattr(args, name) is not None]
    if given:
        what = "the configurable layer (leave out --model)" if args.model else "pretrained models (add --model)"
        raise CliError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} only to {what}")
    if not args.model:
        for name, top in LIMITS.items():
            value = getattr(args, name)
            if value is not None and value > top:
                hint = " (leave it out for d_out = d_model)" if name == "d_out" else ""
                raise CliError(f"--{name.replace('_', '-')} must be at most {top}, the app's limit{hint}; got {value}")


def _check_folders(option: str, path: Path) -> None:
    """CliError if a folder of path (as given: for a relative path, the folders it names) is a symbolic link."""
    for i in range(1, len(path.parts)):
        folder = Path(*path.parts[:i])
        if folder.is_symlink():
            real = Path(os.path.realpath(path.parent)) / path.name
            raise CliError(f"{option} {path} goes through the symbolic link {folder}; outputs are never written "
                           f"through links: give the real path ({real})")


def _check_name_length(option: str, path: Path) -> None:
    """CliError if path's file name has more bytes than its folder's file system takes (255 on most)."""
    try:
        limit = os.pathconf(path.parent, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # no such folder (reported next), or no pathconf (Windows)
        return
    size = len(os.fsencode(path.name))
    if size > limit:
        shown = path.name if len(path.name) <= 40 else f"{path.name[:20]}...{path.name[-12:]}"
        raise CliError(f"{option}: the file name {shown} is {size} bytes long (UTF-8), more than the {limit} its "
                       "folder's file system allows: give a shorter name")


def _check_outputs(args: argparse.Namespace) -> list[tuple[str, Path]]:
    """The (option, path) pairs to write, checked before any work: distinct paths, existing folders,
    no symbolic links (neither the file nor a folder on its path), nothing overwritten without --force, and
    only regular files with it."""
    outputs = [(f"--{name}", getattr(args, name)) for name in OUTPUTS if getattr(args, name) is not None]
    for option, path in outputs:
        _check_folders(option, path)
    seen: dict[str, str] = {}
    for option, path in outputs:
        key = os.path.normcase(os.path.join(os.path.realpath(path.parent), path.name))
        if key in seen:
            raise CliError(f"{seen[key]} and {option} name the same file {path}: give each output its own path")
        seen[key] = option
    for option, path in outputs:
        if not path.name or path.name in (".", ".."):
            raise CliError(f"{option} {path} is not a file name")
        _check_name_length(option, path)
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            if not path.parent.is_dir():
                raise CliError(f"could not write {path}: no folder {path.parent}", code=1) from None
            continue
        except OSError as err:
            raise CliError(f"could not write {path}: {err.strerror or err}", code=1) from None
        if stat.S_ISLNK(mode):
            raise CliError(f"{option} {path} is a symbolic link; outputs are never written through links: "
                           "give the path of a new or regular file")
        if not args.force:
            raise CliError(f"{option} {path} exists; add --force to overwrite")
        if not stat.S_ISREG(mode):
            raise CliError(f"{option} {path} exists and is not a regular file; --force replaces regular files only")
    return outputs


def configurable_trace(args: argparse.Namespace) -> tuple[AttentionTrace, str, dict[str, Any]]:
    from .config import MHAConfig
    from .sources import configurable_trace as trace_text

    h = 4 if args.heads is None else args.heads
    d_model = 64 if args.d_model is None else args.d_model
    seed = 0 if args.seed is None else args.seed
    try:
        cfg = MHAConfig(d_model, h, d_k=args.d_k, d_v=args.d_v, d_out=args.d_out)
    except ValueError as err:
        raise CliError(str(err)) from None
    if not 0 <= seed <= MAX_SEED:
        raise CliError(f"--seed must be a whole number from 0 to {MAX_SEED}, got {seed}")
    pe = not args.no_pe
    for what, text in (("text", args.text), ("context", args.context)):
        if text is not None and len(tokenize(text, MAX_TOKENS + 1)) > MAX_TOKENS:
            print(f"{PROG} report: warning: the {what} is longer than {MAX_TOKENS} tokens; "
                  f"only the first {MAX_TOKENS} are used", file=sys.stderr)
    try:
        trace = trace_text(args.text, cfg, seed=seed, causal=bool(args.causal), positional=pe, context=args.context)
    except ValueError as err:
        raise CliError(str(err)) from None
    title = f"Multi-head attention: h = {cfg.num_heads}, d_model = {cfg.d_model}" + (" (cross-attention)" if trace.cross else "")
    notes = {
        "model": "configurable (random Xavier weights, seeded)",
        "h, d_model, d_k, d_v, d_out": f"{cfg.num_heads}, {cfg.d_model}, {cfg.d_k}, {cfg.d_v}, {cfg.d_out}",
        "seed": seed,
        "causal": bool(args.causal),
        "positional encoding": pe,
        "text": args.text,
        **({"context (keys and values)": args.context} if args.context is not None else {}),
    }
    return trace, title, notes


def pretrained_trace(args: argparse.Namespace) -> tuple[AttentionTrace, str, dict[str, Any]]:
    from .pretrained import ModelLoadError, load_model

    name = None if args.model.strip().lower() == "bundled" else args.model
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # no "Loading weights" bars in a command's output
    except ImportError:
        pass
    try:
        model = load_model(name, max_tokens=MAX_TOKENS)
    except (ModelLoadError, ValueError, OSError) as err:
        raise CliError(f"could not load the model {args.model!r}: {err}", code=1) from None
    if args.context is not None and model.kind != "encoder-decoder":
        raise CliError(f"--context is the decoder text of an encoder-decoder model; {model.name} has no decoder "
                       f"input (kind: {model.kind})")
    if not args.text.strip():
        raise CliError("the text is empty")
    part = args.part or model.parts[0]
    layer = 0 if args.layer is None else args.layer
    try:
        with warnings.catch_warnings():  # a failed check is said once, by checked(), in the command's own words
            warnings.simplefilter("ignore", TraceCheckWarning)
            trace = model.trace(args.text, layer, part=part, decoder_text=args.context)
    except (ValueError, IndexError) as err:
        raise CliError(str(err)) from None
    if trace.meta.get("truncated"):
        print(f"{PROG} report: warning: the input is longer than the model's maximum of {model.max_tokens} tokens; "
              f"{trace.meta['truncated']} tokens were cut off the end", file=sys.stderr)
    title = f"{model.name}: {part} layer {layer} of {model.num_layers[part]}"
    notes = {
        "model": f"{model.name} ({model.architecture}, {model.kind})",
        "part, layer": f"{part}, {layer}",
        "text": args.text,
        **({"decoder text": args.context} if args.context is not None else {}),
    }
    if trace.missing:
        notes["available"] = f"attention weights only: {model.unavailable}"
    return trace, title, notes


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write(path: Path, write: Callable[[IO[bytes]], None], *, force: bool) -> None:
    """write(file) into a new temporary file next to path (.mha-viz-*.part, a short name whatever path's length),
    then move it into place.

    Without force a hard link (it fails if path exists, even as a link) or, where the file system
    has none, an exclusive create followed by os.replace; with force os.replace, which replaces a
    link itself and never writes through it. The temporary file is removed on any failure.
    """
    try:
        fd, temp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=".part", dir=path.parent)  # short: any name fits
    except OSError as err:
        raise CliError(f"could not write {path}: {err.strerror or err}", code=1) from None
    try:
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), 0o666 & ~_umask())  # as an ordinary new file (mkstemp makes it 0600)
            write(file)
        if force:
            os.replace(temp, path)
        else:
            _link_new(temp, path)
    except FileExistsError:
        raise CliError(f"{path} exists (created while this ran); add --force to overwrite") from None
    except OSError as err:
        raise CliError(f"could not write {path}: {err.strerror or err}", code=1) from None
    finally:
        if os.path.lexists(temp):
            os.unlink(temp)


def _link_new(temp: str, path: Path) -> None:
    """Give temp's file the new name path; FileExistsError if path exists (file, folder or link)."""
    try:
        os.link(temp, path)
    except OSError as err:
        if err.errno not in _NO_HARD_LINKS:
            raise
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600))
        os.replace(temp, path)  # over the empty file just created


def report(args: argparse.Namespace, argv: list[str]) -> None:
    _check_options(args)
    outputs = _check_outputs(args)
    trace, title, notes = pretrained_trace(args) if args.model else configurable_trace(args)
    failed = checked(trace, args)
    notes["command"] = shlex.join(["python", "-m", "mha_viz", *argv])
    dtype = "float16" if args.float16 else None
    from .export import write_json, write_npz

    writers = {
        "--npz": lambda file: write_npz(trace, file, dtype=dtype),
        "--json": lambda file: write_json(trace, file, array_format=args.json_arrays, dtype=dtype),
        "--out": lambda file: file.write(_html(trace, args.title or title, notes, args.out.stem).encode("utf-8")),
    }
    for option, path in outputs:
        _check_folders(option, path)  # again: a folder may have been swapped for a link while the layer was traced
        try:
            _write(path, writers[option], force=args.force)
        except ValueError as err:  # a value beyond float16's range
            raise CliError(f"could not write {path}: {err}", code=1) from None
    H, T, S = trace.weights.shape
    for _, path in outputs:
        print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB): {H} heads, {T} query x {S} key tokens")
    if failed:
        raise CliError(f"{failed} Written anyway (--allow-failed-check).", code=FAILED_CHECK)


def figure(args: argparse.Namespace) -> None:
    """Write the traced layer's heads grid as a figure for a paper (format from --out's suffix)."""
    from .paper import figure_format

    if args.out is None:
        raise CliError("nothing to write: give --out heads.pdf (or .svg, .png)")
    try:
        fmt = figure_format(args.out)
    except ValueError as err:
        raise CliError(str(err)) from None
    _check_options(args)
    outputs = _check_outputs(args)
    trace = (pretrained_trace(args) if args.model else configurable_trace(args))[0]
    failed = checked(trace, args)
    from .figures import heads_figure
    from .paper import FigureExportError, figure_bytes

    try:
        data = figure_bytes(heads_figure(trace, title=args.title), fmt,
                            preset=None if args.preset == "none" else "paper", columns=args.columns)
    except FigureExportError as err:
        raise CliError(str(err), code=1) from None
    for option, path in outputs:
        _check_folders(option, path)
        _write(path, lambda file: file.write(data), force=args.force)
        print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB): {trace.weights.shape[0]} heads, "
              f"{len(trace.query_tokens)} query x {len(trace.key_tokens)} key tokens")
    if failed:
        raise CliError(f"{failed} Written anyway (--allow-failed-check).", code=FAILED_CHECK)


def checked(trace: AttentionTrace, args: argparse.Namespace) -> str | None:
    """The trace's failed self-check (mha_viz.checks.failure_message), or None when it passed or has none.
    CliError with code FAILED_CHECK before anything is written, unless --allow-failed-check."""
    failed = failure_message(trace)
    if failed and not args.allow_failed_check:
        raise CliError(f"{failed} Nothing was written (--allow-failed-check writes it anyway; the exit status stays "
                       f"{FAILED_CHECK}).", code=FAILED_CHECK)
    return failed


def _html(trace: AttentionTrace, title: str, notes: dict[str, Any], stem: str) -> str:
    from .report import html_report

    return html_report(trace, title=title, notes=notes, filename=stem)


def _out_of_memory(err: BaseException) -> bool:
    """A MemoryError, or torch's RuntimeError when an allocation fails."""
    text = str(err).lower()
    return isinstance(err, MemoryError) or any(s in text for s in ("not enough memory", "can't allocate", "out of memory"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser()
    args, options = parser.parse_known_args(argv)  # usage errors: argparse prints them and exits with 2
    if options and args.command != "serve":
        parser.error(f"unrecognized arguments: {' '.join(options)}")
    try:
        if args.command == "serve":
            return serve(options)
        if args.command == "report":
            report(args, argv)
        elif args.command == "figure":
            figure(args)
    except CliError as err:
        print(f"{PROG} {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return err.code
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130
    except (MemoryError, RuntimeError) as err:
        message = ("out of memory: try fewer heads, a smaller d_model or a shorter text" if _out_of_memory(err)
                   else _one_line(err))
        print(f"{PROG} {args.command}: error: {message}", file=sys.stderr)
        return 1
    except Exception as err:  # noqa: BLE001 - a bug, reported in one line like every other error
        print(f"{PROG} {args.command}: error: unexpected {type(err).__name__}: {_one_line(err)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

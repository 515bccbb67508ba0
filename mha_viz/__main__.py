"""Command line: python -m mha_viz report ...

    python -m mha_viz report --text "The cat sat on the mat" --heads 8 --d-model 64 --out report.html
    python -m mha_viz report --text "..." --context "second sentence" --causal --npz trace.npz --json trace.json
    python -m mha_viz report --model bundled --layer 2 --text "The cat sat on the mat" --out report.html
    python -m mha_viz report --model org/name --part decoder --layer 0 --text "..." --out report.html

Exit codes: 0 written; 1 the model could not be loaded or a file not written; 2 invalid
arguments (the message says which and why). Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from .params import DEFAULT_TEXT, MAX_SEED, MAX_TOKENS
from .text import tokenize
from .trace import AttentionTrace

PROG = "python -m mha_viz"
CONFIGURABLE_OPTIONS = ("heads", "d_model", "d_k", "d_v", "d_out", "seed", "causal", "no_pe")
PRETRAINED_OPTIONS = ("layer", "part")


class CliError(Exception):
    """A problem to report in one line; code 2 = bad arguments, 1 = could not load or write."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


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
    report.add_argument("--text", default=DEFAULT_TEXT, help="the input sentence (default: %(default)r)")
    report.add_argument("--context", help="configurable: a second sentence for cross-attention (keys and values); "
                        "encoder-decoder models: the decoder text")
    group = report.add_argument_group("configurable layer (without --model)")
    group.add_argument("--heads", "-H", type=int, help="number of heads h (default 4)")
    group.add_argument("--d-model", type=int, help="model width d_model (default 64)")
    group.add_argument("--d-k", type=int, help="query/key width per head (default d_model / h)")
    group.add_argument("--d-v", type=int, help="value width per head (default d_model / h)")
    group.add_argument("--d-out", type=int, help="output width after W_O (default d_model)")
    group.add_argument("--seed", type=int, help="seed of the weights and token vectors (default 0)")
    group.add_argument("--causal", action="store_true", default=None, help="mask future tokens")
    group.add_argument("--no-pe", action="store_true", default=None, help="no sinusoidal positional encoding")
    group = report.add_argument_group("pretrained model")
    group.add_argument("--model", help="'bundled' (all-MiniLM-L6-v2, offline), a Hugging Face id org/name, or a folder")
    group.add_argument("--layer", type=int, help="layer number, from 0 (default 0)")
    group.add_argument("--part", choices=("encoder", "decoder", "cross"), help="attention to trace (default: the model's first)")
    group = report.add_argument_group("output (at least one)")
    group.add_argument("--out", type=Path, help="HTML report file")
    group.add_argument("--npz", type=Path, help="the trace's arrays as .npz (numpy)")
    group.add_argument("--json", type=Path, help="the trace as JSON")
    group.add_argument("--title", help="the report's title (default: describes the layer)")
    return parser


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
        model = load_model(name)
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


def _write(path: Path, data: str | bytes) -> None:
    try:
        if isinstance(data, str):
            path.write_text(data, encoding="utf-8")
        else:
            path.write_bytes(data)
    except OSError as err:
        raise CliError(f"could not write {path}: {err.strerror or err}", code=1) from None


def report(args: argparse.Namespace, argv: list[str]) -> None:
    _check_options(args)
    trace, title, notes = pretrained_trace(args) if args.model else configurable_trace(args)
    notes["command"] = shlex.join(["python", "-m", "mha_viz", *argv])
    written = []
    if args.npz is not None:
        from .export import trace_to_npz

        _write(args.npz, trace_to_npz(trace))
        written.append(args.npz)
    if args.json is not None:
        from .export import trace_to_json

        _write(args.json, trace_to_json(trace))
        written.append(args.json)
    if args.out is not None:
        from .report import html_report

        _write(args.out, html_report(trace, title=args.title or title, notes=notes, filename=args.out.stem))
        written.append(args.out)
    H, T, S = trace.weights.shape
    for path in written:
        print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB): {H} heads, {T} query x {S} key tokens")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)  # usage errors: argparse prints them and exits with 2
    try:
        if args.command == "report":
            report(args, argv)
    except CliError as err:
        print(f"{PROG} {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return err.code
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Field parsers: a URL parameter's text -> its value, or ValueError (TypeError, OverflowError) when it is invalid.

Pure Python. The page's fields (mha_viz.params) and every part's (mha_viz/ui/parts/) are declared with these, as
StateFields (mha_viz.parts), so that one rule says what a link may name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from .parts import StateField

BOOL = "true or false"
MODEL_ID = "a Hugging Face model id such as gpt2 or org/name"
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?")


def whole(raw: str, lo: int, hi: int) -> int:
    """A whole number from lo to hi."""
    value = int(raw.strip())
    if not lo <= value <= hi:
        raise ValueError
    return value


def boolean(raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError


def short_text(n: int) -> Callable[[str], str]:
    """Text of at most n characters."""
    def parse(raw: str) -> str:
        if len(raw) > n:
            raise ValueError
        return raw

    return parse


def heads(hi: int) -> Callable[[str], tuple[int, ...]]:
    """Comma-separated head numbers from 0 to hi - 1, each once, in order."""
    return lambda raw: tuple(dict.fromkeys(whole(p, 0, hi - 1) for p in raw.split(",") if p.strip()))


def optional_int(hi: int) -> Callable[[str], int | None]:
    """A whole number from 0 to hi, or None for "", auto, mean or last."""
    def parse(raw: str) -> int | None:
        return None if raw.strip().lower() in ("", "auto", "mean", "last") else whole(raw, 0, hi)

    return parse


def number(lo: float, hi: float) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        value = float(raw.strip())
        if not lo <= value <= hi:  # NaN fails too
            raise ValueError
        return value

    return parse


def one_of(choices: Sequence[str]) -> Callable[[str], str]:
    """One of the choices (a registry too: the names registered when the link is read)."""
    def parse(raw: str) -> str:
        if raw not in choices:
            raise ValueError
        return raw

    return parse


def one_of_registered(names: Sequence[str]) -> Callable[[], str]:
    """What a valid value of one_of(names) looks like, read when the notice is written (a registry grows)."""
    return lambda: "one of " + ", ".join(names)


def model_id(raw: str) -> str:
    """A hub id like org/name; paths and anything else are refused (they are typed, not linked)."""
    raw = raw.strip()
    if raw and (not _HUB_ID.fullmatch(raw) or ".." in raw):
        raise ValueError
    return raw


def ranged(name: str, default: object, lo: float, hi: float, expected: str, *, even: bool = False,
           optional: bool = False) -> StateField:
    """A number from lo to hi: the range a link may name and its widget offers (StateField.bounds). Whole numbers
    when lo and hi are ints; even: even ones only; optional: "" or "auto" is None. expected may name {lo} and {hi}."""
    integral = isinstance(lo, int) and isinstance(hi, int)

    def parse(raw: str) -> int | float | None:
        if optional and raw.strip().lower() in ("", "auto"):
            return None
        value = whole(raw, lo, hi) if integral else number(lo, hi)(raw)
        if even and value % 2:
            raise ValueError
        return value

    def shown(x: float) -> str:
        return str(x) if isinstance(x, int) else f"{x:g}"

    return StateField(name, default, parse, expected.format(lo=shown(lo), hi=shown(hi)), bounds=(lo, hi))


def choice(name: str, default: str, choices: Sequence[str]) -> StateField:
    """A field whose value is one of choices."""
    return StateField(name, default, one_of(choices), "one of " + ", ".join(choices))

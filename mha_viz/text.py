"""Text to input vectors for the configurable model, deterministically.

1. Tokens: words (runs of Unicode letters, digits, marks and underscores) and single symbols
   (an emoji ZWJ sequence, modifier or flag stays one token), e.g. "The cat's toy." ->
   The | cat | ' | s | toy | .  Tokens longer than MAX_TOKEN_CHARS are cut into pieces. Text is NFC-normalised first; control and format characters
   other than ZWJ are dropped.
2. Embedding: the vector of a token is drawn from N(0, 1) with a generator seeded by
   sha256(seed, token), so the same token gets the same vector in every sentence and process.
3. Positional encoding (on by default): the sinusoidal code of "Attention Is All You Need",
   PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)), is added.
"""

from __future__ import annotations

import hashlib
import unicodedata

import torch
from torch import Tensor

_ZWJ = "\u200d"
MAX_TOKEN_CHARS = 32  # a longer word or symbol sequence is cut into pieces of this size
DEFAULT_TEXT = "The animal didn't cross the street because it was too tired"  # the app's and the CLI's example


def clean_text(text: str) -> str:
    """NFC-normalise and drop control, format and unassigned characters (keeping ZWJ and tags)."""
    text = unicodedata.normalize("NFC", text)
    return "".join(
        ch
        for ch in text
        if ch.isspace() or ch == _ZWJ or "\U000e0020" <= ch <= "\U000e007f"
        or unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co", "Cn")
    )


def _is_word_char(ch: str) -> bool:
    return ch == "_" or unicodedata.category(ch)[0] in "LNM"


def _is_regional_indicator(ch: str) -> bool:
    return "\U0001f1e6" <= ch <= "\U0001f1ff"


def _continues(current: str, is_word: bool, ch: str) -> bool:
    """True when ch extends the token `current` rather than starting a new one."""
    if len(current) >= MAX_TOKEN_CHARS:
        return False
    if is_word:
        return _is_word_char(ch) or ch == _ZWJ  # a ZWJ inside a word (Indic conjuncts) keeps it whole
    prev = current[-1]
    return (
        prev == _ZWJ
        or ch == _ZWJ
        or unicodedata.category(ch) in ("Mn", "Me")  # combining marks, variation selectors
        or "\U0001f3fb" <= ch <= "\U0001f3ff"  # emoji skin-tone modifiers
        or "\U000e0020" <= ch <= "\U000e007f"  # emoji tag sequences (subdivision flags)
        or (len(current) == 1 and _is_regional_indicator(prev) and _is_regional_indicator(ch))  # one flag
    )


def tokenize(text: str, max_tokens: int | None = None) -> list[str]:
    """Split text into word and symbol tokens; stop after max_tokens when given."""
    tokens: list[str] = []
    current, is_word = "", False
    for ch in clean_text(text):
        if ch.isspace():
            current = _flush(tokens, current)
        elif current and _continues(current, is_word, ch):
            current += ch
        else:
            current = _flush(tokens, current)
            current, is_word = ch, _is_word_char(ch)
        if max_tokens is not None and len(tokens) >= max_tokens:
            return tokens[:max_tokens]
    _flush(tokens, current)
    return tokens if max_tokens is None else tokens[:max_tokens]


def repeat_to_tokens(text: str, n: int) -> str:
    """text repeated until it has exactly n tokens (tokenize), as tokens separated by spaces."""
    tokens = tokenize(text)
    if not tokens:
        raise ValueError("the text has no tokens")
    return " ".join((tokens * -(-n // len(tokens)))[:n])


def _flush(tokens: list[str], current: str) -> str:
    if current:
        tokens.append(current)
    return ""


def token_vector(token: str, d_model: int, seed: int = 0) -> Tensor:
    """The fixed N(0, 1) vector of one token for one seed: (d_model,)."""
    digest = hashlib.sha256(f"{seed}\x00{token}".encode()).digest()
    gen = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))
    return torch.randn(d_model, generator=gen)  # (d_model,)


def positional_encoding(T: int, d_model: int) -> Tensor:
    """Sinusoidal positional encoding: (T, d_model)."""
    pos = torch.arange(T, dtype=torch.float64)[:, None]  # (T, 1)
    i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(d/2),)
    angle = pos / 10000.0 ** (i / d_model)  # (T, ceil(d/2))
    pe = torch.zeros(T, d_model, dtype=torch.float64)  # (T, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.float()


def embed_tokens(tokens: list[str], d_model: int, *, seed: int = 0, positional: bool = True) -> Tensor:
    """Stack token vectors (plus positional encoding): (T, d_model)."""
    if not tokens:
        raise ValueError("no tokens to embed: the text is empty or has no visible characters")
    vectors = {t: token_vector(t, d_model, seed) for t in dict.fromkeys(tokens)}
    x = torch.stack([vectors[t] for t in tokens])  # (T, d_model)
    if positional:
        x = x + positional_encoding(len(tokens), d_model)  # (T, d_model)
    return x


def embed_text(
    text: str, d_model: int, *, seed: int = 0, positional: bool = True, max_tokens: int | None = None
) -> tuple[list[str], Tensor]:
    """Tokenize and embed: (tokens, x (T, d_model)). Raises ValueError on text with no tokens."""
    tokens = tokenize(text, max_tokens)
    return tokens, embed_tokens(tokens, d_model, seed=seed, positional=positional)

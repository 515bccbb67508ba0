"""A text as a model reads it (its token ids and tokens), and how much of it the vocabulary knows."""

from __future__ import annotations

from dataclasses import dataclass

CHARS_PER_TOKEN = 64  # read at most this many characters a token: longer texts are cut before tokenising


@dataclass(frozen=True)
class Coverage:
    """How much of a text the model's vocabulary knows (special tokens not counted)."""

    tokens: int  # the text's tokens
    unknown: int  # of them, the tokenizer's unknown token ([UNK], <unk>)
    characters: int  # of them, a single non-ASCII character cut out of a word (e.g. "##ा", "▁你")

    @property
    def unknown_share(self) -> float:
        return self.unknown / self.tokens if self.tokens else 0.0

    @property
    def character_share(self) -> float:
        return self.characters / self.tokens if self.tokens else 0.0


@dataclass(frozen=True)
class Encoded:
    """One text as the model reads it."""

    ids: tuple[int, ...]
    tokens: tuple[str, ...]
    dropped: int  # tokens cut off to fit max_tokens

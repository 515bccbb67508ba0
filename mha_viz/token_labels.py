"""Token labels: what each token of a real tokenizer spells, as the text it stands for. The one place every view,
export, report and the notebook widget get their token strings from.

Byte-level BPE (GPT-2, RoBERTa, Llama 3, Qwen, ...) stores a token as bytes spelled with printable stand-ins
("Ġ" for a space, "Ã©" for the two bytes of "é", "ä½" for two of the three bytes of "你"); shown as they are, they
are mojibake, and decoding one token alone gives U+FFFD where it holds part of a character. Here the tokens of a text
are read as one byte stream: each character goes to the token that holds its first byte, so

    "".join(token_labels(tokenizer, ids)) == the text those ids spell (special tokens as written)

and a token that holds only the rest of a character begun in the token before it spells "" (figures draw it as
figures.common.CONTINUES, the dotted circle of a mark that attaches to what comes before). A byte sequence that is
no UTF-8 at all (a text cut in the middle of a character) is shown as its hex bytes, e.g. "⟨e4 bd⟩". A token on its
own (a vocabulary row, a next-token candidate: vocab_labels) gets the characters it holds whole and the hex bytes of
the parts it holds of others. Other tokenizers (WordPiece's "##ing", SentencePiece's "▁the") keep their own tokens.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Sequence
from functools import cache

_BYTE_LEVEL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> is it byte-level?


@cache
def byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-in of each byte (bytes_to_unicode), inverted: stand-in character -> byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def is_byte_level(tokenizer: object) -> bool:
    """True for a byte-level BPE tokenizer: a fast one whose decoder is ByteLevel, or a slow one with a byte_decoder."""
    try:
        return _BYTE_LEVEL[tokenizer]
    except (KeyError, TypeError):
        pass
    backend = getattr(tokenizer, "backend_tokenizer", None)
    found = hasattr(tokenizer, "byte_decoder") or (backend is not None and "ByteLevel" in repr(backend.decoder))
    try:
        _BYTE_LEVEL[tokenizer] = found
    except TypeError:  # an object that takes no weak reference: asked again next time
        pass
    return found


def _added(tokenizer: object) -> set[int]:
    """Ids of the tokens added as whole strings (special tokens, added words): written as they are, not as bytes."""
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return set(added) | set(getattr(tokenizer, "all_special_ids", ()) or ())


def _token_bytes(token: str) -> bytes | None:
    """The bytes a byte-level token spells; None when a character is no byte's stand-in (then it is not bytes)."""
    table = byte_decoder()
    try:
        return bytes(table[c] for c in token)
    except KeyError:
        return None


def _hex(data: bytes) -> str:
    return "⟨" + " ".join(f"{b:02x}" for b in data) + "⟩"


def _is_start(b: int) -> bool:
    return b & 0xC0 != 0x80  # not a UTF-8 continuation byte (10xxxxxx)


def _spell(run: list[bytes]) -> list[str]:
    """The labels of consecutive byte tokens: each character credited to the token holding its first byte."""
    stream = b"".join(run)
    owner = [i for i, piece in enumerate(run) for _ in piece]  # [bytes] which token holds each byte
    labels = [""] * len(run)
    start = 0
    while start < len(stream):
        end = start + 1
        while end < len(stream) and not _is_start(stream[end]):
            end += 1
        if not _is_start(stream[start]):  # the rest of a character that began before the run: in hex, by token
            for i in sorted(set(owner[start:end])):
                labels[i] += _hex(bytes(stream[j] for j in range(start, end) if owner[j] == i))
        else:
            chunk = stream[start:end]
            try:
                labels[owner[start]] += chunk.decode("utf-8")
            except UnicodeDecodeError:  # no UTF-8 (e.g. a character cut off at the end): its bytes, in hex
                labels[owner[start]] += _hex(chunk)
        start = end
    return labels


def _labels(tokenizer: object, ids: list[int], raw: list[str], alone: bool) -> tuple[str, ...]:
    added = _added(tokenizer)
    labels: list[str] = []
    run: list[bytes] = []
    for token_id, token in zip(ids, raw):
        data = None if token_id in added else _token_bytes(token)
        if data is None or alone:  # a special or added token (as written) ends the byte run before it
            labels += _spell(run)
            run = []
            labels += [token] if data is None else _spell([data])
        else:
            run.append(data)
    return tuple(labels + _spell(run))


def _raw(tokenizer: object, ids: Sequence[int]) -> tuple[list[int], list[str]]:
    ids = [int(i) for i in ids]
    raw = tokenizer.convert_ids_to_tokens(ids)
    return ids, [t if isinstance(t, str) else f"<id {i}>" for i, t in zip(ids, raw)]


def token_labels(tokenizer: object, ids: Sequence[int]) -> tuple[str, ...]:
    """What each token of a sequence spells (module docstring): for a byte-level tokenizer the text, characters
    credited to the token holding their first byte, so the labels join back to the text; otherwise the tokenizer's
    own tokens (convert_ids_to_tokens)."""
    ids, raw = _raw(tokenizer, ids)
    return _labels(tokenizer, ids, raw, alone=False) if is_byte_level(tokenizer) else tuple(raw)


def vocab_labels(tokenizer: object, ids: Sequence[int]) -> tuple[str, ...]:
    """Each token's label on its own (a vocabulary row, a next-token candidate): the characters it holds whole, and the
    hex bytes of the parts it holds of others, e.g. "ä½" -> "⟨e4 bd⟩"."""
    ids, raw = _raw(tokenizer, ids)
    return _labels(tokenizer, ids, raw, alone=True) if is_byte_level(tokenizer) else tuple(raw)


def id_label(tokenizer: object, token_id: int) -> str:
    """One token's label on its own (vocab_labels)."""
    return vocab_labels(tokenizer, [token_id])[0]


def spelled(tokenizer: object, ids: Sequence[int], cuts: Sequence[int]) -> tuple[str, ...]:
    """The text the ids spell, in len(cuts) + 1 pieces cut before each position in cuts (ascending): for a
    byte-level tokenizer the pieces' labels joined (a character split across a cut goes to the piece holding its
    first byte); otherwise the tokenizer's convert_tokens_to_string of each piece (WordPiece's "##" joined)."""
    bounds = [0, *cuts, len(ids)]
    if is_byte_level(tokenizer):
        labels = token_labels(tokenizer, ids)
        return tuple("".join(labels[a:b]) for a, b in itertools.pairwise(bounds))
    ids, raw = _raw(tokenizer, ids)
    return tuple(tokenizer.convert_tokens_to_string(raw[a:b]) for a, b in itertools.pairwise(bounds))


def vocab_token(tokenizer: object, label: str) -> str:
    """The vocabulary's spelling of a label, the inverse of vocab_labels for whole characters: a byte-level
    tokenizer's stand-ins for the label's UTF-8 bytes (" fox" -> "Ġfox"); any other tokenizer's label as it is."""
    if not is_byte_level(tokenizer):
        return label
    encoder = {b: c for c, b in byte_decoder().items()}
    return "".join(encoder[b] for b in label.encode("utf-8"))

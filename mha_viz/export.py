"""An AttentionTrace as a file: NPZ (numpy, exact) and JSON (any language), plus safe file names and share links.

Writing streams: write_npz / write_json write to a binary file object chunk by chunk, iter_json
yields the JSON as bytes chunks, so a 512-token trace never sits in memory as one big string.
export_size says how large a file will be before it is built; export_bytes builds one in memory
(a server that builds exports for many people at once takes a slot around it: mha_viz.serve.slot).
trace_to_npz / trace_to_json are export_bytes for one format.

Arrays keep their dtype (mha-viz's traces are float32) unless a dtype is stated: dtype="float16"
(or "float32") stores every floating array in that dtype, and the file says so in its dtypes; a
finite value beyond the dtype's range is refused (ValueError), never turned into infinity.

NPZ (trace_to_npz / write_npz / trace_from_npz), read with ``np.load(path)`` (no pickle needed):
    weights, queries, keys, values, scores, head_outputs, concat, output, W_O, b_O, W_Q, W_K, W_V, b_Q, b_K, b_V,
    sinks lambdas maps map_scores gates
                     every array the trace holds (absent ones are left out; sinks: gpt-oss and the window variant,
                     lambdas, maps, map_scores: differential attention, gates: mixture-of-heads)
    scale            0-d float64: the factor on Q K^T (absent when the trace does not say)
    score_bias:<name>  each named term the model adds to the scores [H, T, S] (T5 bias, ALiBi, DeBERTa ...)
    softcap          0-d float64: the logit soft-capping constant (absent: none)
    query_tokens, key_tokens   unicode arrays [T], [S]
    causal, cross    0-d bool arrays         kv_heads   int64 [H], only for grouped-query attention
    meta             0-d unicode array: trace.meta as a JSON string
    format           "mha-viz-trace/1"
Tokens are numpy unicode strings, which cannot end in a NUL character ("\\x00"); mha-viz's
tokenizer drops control characters, so its tokens never do.

JSON (trace_to_json / write_json / iter_json / trace_from_json): one object
    format, nonfinite, query_tokens, key_tokens, causal, cross, kv_heads (null: one K/V head per query head),
    scale, shapes {name: [dims]}, dtypes {name: "float32"}, array_format, missing [names], meta {...},
    arrays {name: ...}  (weights `[H][T][S]`, ...; the layout of mha_viz.trace)
array_format "lists" (the default): each array as nested lists of numbers, each number the shortest
decimal that reads back to the same value in the array's dtype. JSON has no infinity: a
non-finite entry is written as the *string* "-inf", "inf" or "nan" (masked scores are "-inf");
``np.array(x, dtype=np.float32)`` turns those strings back into numbers.
array_format "base64": each array as one string, the base64 (standard alphabet, padded) of its
bytes in C order, little-endian: exact, about 5.3 characters per float32 instead of about 12,
and read with ``np.frombuffer(base64.b64decode(s), "<f4").reshape(shape)`` (JavaScript:
``new Float32Array(Uint8Array.from(atob(s), c => c.charCodeAt(0)).buffer)``).
Non-finite floats inside meta are the strings too. Token text is kept verbatim, but the
characters < > & and U+2028/U+2029 are written as \\u escapes, so the JSON text can be pasted
inside an HTML <script> element without ending it; every JSON parser reads the original
characters back.
"""

from __future__ import annotations

import base64
import io
import json
import math
import re
import zipfile
from collections.abc import Iterator, Mapping
from typing import IO, Any
from urllib.parse import quote, urlencode

import numpy as np

from .trace import AttentionTrace

FORMAT = "mha-viz-trace/1"
ARRAY_FIELDS = ("weights", "queries", "keys", "values", "scores", "head_outputs", "concat", "output", "W_O", "b_O",
                "W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "sinks", "lambdas", "maps", "map_scores", "gates")
ARRAY_FORMATS = ("lists", "base64")
DTYPES = ("float32", "float16")  # what a stated dtype may be
NONFINITE_NOTE = 'non-finite numbers are the strings "-inf", "inf", "nan" (masked scores are "-inf")'
BASE64_NOTE = "arrays are base64 of little-endian bytes: non-finite values are IEEE infinities and NaN (masked scores -inf)"
SIZE_SAMPLE = 8192  # export_size formats at most this many numbers of each array (JSON lists)
_CHUNK_NUMBERS = 1 << 16  # numbers formatted per JSON chunk (~0.8 MB of text)
_CHUNK_BYTES = 3 << 20  # bytes base64-encoded per JSON chunk (a multiple of 3: chunks join into one string)
_JSON_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_SURROGATE = re.compile("[\ud800-\udfff]")
_FILENAME_BAD = re.compile(r"[^A-Za-z0-9._-]+")


BIAS = "score_bias:"  # stored name prefix of the named terms a model adds to the scores


def trace_arrays(trace: AttentionTrace) -> dict[str, np.ndarray]:
    """The arrays the trace holds, by field name (weights first; absent intermediates left out), then each
    named score_bias term as "score_bias:<name>"."""
    arrays = {name: np.asarray(getattr(trace, name)) for name in ARRAY_FIELDS if getattr(trace, name) is not None}
    return arrays | {f"{BIAS}{name}": np.asarray(a) for name, a in trace.score_bias.items()}


def _score_bias(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The score_bias terms among stored arrays (keys "score_bias:<name>")."""
    return {name.removeprefix(BIAS): a for name, a in arrays.items() if name.startswith(BIAS)}


def jsonable(value: Any) -> Any:
    """value as plain JSON data: numpy scalars and arrays become numbers and lists, tuples lists,
    non-finite floats the strings "inf", "-inf", "nan"; anything else unknown becomes str(value)."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, float):
        return value if math.isfinite(value) else ("nan" if math.isnan(value) else "inf" if value > 0 else "-inf")
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


def safe_json(text: str) -> str:
    """JSON text with < > & U+2028 U+2029 and lone surrogates as \\u escapes: the same data,
    but inert inside HTML (no "</script>") and encodable as UTF-8."""
    for char, escape in _JSON_UNSAFE.items():
        text = text.replace(char, escape)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def dumps(value: Any, indent: int | None = None) -> str:
    """Strict JSON (no NaN/Infinity literals) of jsonable(value), made safe with safe_json."""
    return safe_json(json.dumps(jsonable(value), ensure_ascii=False, allow_nan=False, indent=indent))


# ------------------------------------------------------------------------------------- stored dtypes


def _check_options(array_format: str = "lists", dtype: str | None = None) -> None:
    if array_format not in ARRAY_FORMATS:
        raise ValueError(f"array_format must be one of {', '.join(ARRAY_FORMATS)}, got {array_format!r}")
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype must be None (each array's own) or one of {', '.join(DTYPES)}, got {dtype!r}")


def _stored_dtype(a: np.ndarray, dtype: str | None) -> np.dtype:
    """The dtype a is written in: its own, or the stated one for a floating array."""
    return np.dtype(dtype) if dtype is not None and a.dtype.kind == "f" else a.dtype


def _stored(name: str, a: np.ndarray, dtype: str | None) -> np.ndarray:
    """a in its stored dtype; ValueError if a finite value does not fit (it would become infinity)."""
    target = _stored_dtype(a, dtype)
    if target == a.dtype:
        return a
    with np.errstate(over="ignore"):
        out = a.astype(target)
    inf = np.isinf(out)
    if inf.any() and np.isfinite(a[inf]).any():
        raise ValueError(f"{name} has values beyond {target}'s range (±{np.finfo(target).max:g}); "
                         f"export it in its own dtype ({a.dtype})")
    return out


def stored_arrays(trace: AttentionTrace, dtype: str | None = None) -> Iterator[tuple[str, np.ndarray]]:
    """(name, array as written), one at a time: a cast copy (dtype stated) lives only while it is written."""
    for name, a in trace_arrays(trace).items():
        yield name, _stored(name, a, dtype)


def _validate(trace: AttentionTrace, array_format: str, dtype: str | None) -> None:
    """ValueError for an unknown option or an array that does not fit dtype, before a byte is written."""
    _check_options(array_format, dtype)
    if dtype is not None:
        for _ in stored_arrays(trace, dtype):
            pass


# ---------------------------------------------------------------------------------------------- NPZ


def _npz_extras(trace: AttentionTrace) -> dict[str, np.ndarray]:
    """The small members of the .npz after the arrays: tokens, flags, scale, meta, format."""
    extras = {
        "query_tokens": np.array(trace.query_tokens, dtype=np.str_),
        "key_tokens": np.array(trace.key_tokens, dtype=np.str_),
        "causal": np.array(bool(trace.causal)),
        "cross": np.array(bool(trace.cross)),
    }
    if trace.kv_heads is not None:
        extras["kv_heads"] = np.array(trace.kv_heads, dtype=np.int64)
    if trace.scale is not None:
        extras["scale"] = np.array(float(trace.scale))
    if trace.softcap is not None:
        extras["softcap"] = np.array(float(trace.softcap))
    extras["meta"] = np.array(json.dumps(jsonable(trace.meta), ensure_ascii=False, allow_nan=False))
    extras["format"] = np.array(FORMAT)
    return extras


def _npz_zip(file: IO[bytes], compress: bool) -> zipfile.ZipFile:
    return zipfile.ZipFile(file, mode="w", compression=zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED,
                           allowZip64=True)


def write_npz(trace: AttentionTrace, file: IO[bytes], *, compress: bool = True, dtype: str | None = None) -> None:
    """Write the trace as a .npz file (the layout of np.savez) to a binary file object, one array at a time.

    Memory: one array (its cast copy when dtype is stated) and numpy's 16 MB write buffer.
    """
    _validate(trace, "lists", dtype)
    with _npz_zip(file, compress) as archive:
        for name, value in [*stored_arrays(trace, dtype), *_npz_extras(trace).items()]:
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:  # force_zip64 as np.savez does
                np.lib.format.write_array(member, value, allow_pickle=False)


class _Counter(io.RawIOBase):
    """A seekable binary sink that keeps nothing but its size."""

    def __init__(self) -> None:
        super().__init__()
        self.position = self.size = 0

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self.position += n
        self.size = max(self.size, self.position)
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.position = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence] + offset
        return self.position

    def tell(self) -> int:
        return self.position


def _npy_header(a: np.ndarray, dtype: np.dtype) -> bytes:
    """The .npy header np.lib.format.write_array puts before a's bytes once cast to dtype (version 1.0, else 2.0)."""
    header = {**np.lib.format.header_data_from_array_1_0(a), "descr": np.lib.format.dtype_to_descr(dtype)}
    buffer = io.BytesIO()
    try:
        np.lib.format.write_array_header_1_0(buffer, header)
    except ValueError:  # a header over 64 KiB
        buffer = io.BytesIO()
        np.lib.format.write_array_header_2_0(buffer, header)
    return buffer.getvalue()


def _npz_size(trace: AttentionTrace, dtype: str | None) -> int:
    """The exact size of write_npz(trace, seekable_file, compress=False, dtype=dtype), without writing the arrays:
    the archive with each array's .npy header alone, plus the arrays' bytes."""
    counter, data = _Counter(), 0
    with _npz_zip(counter, compress=False) as archive:
        for name, a in trace_arrays(trace).items():
            target = _stored_dtype(a, dtype)
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                member.write(_npy_header(a, target))
            data += a.size * target.itemsize
        for name, value in _npz_extras(trace).items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, value, allow_pickle=False)
    return counter.size + data


def trace_to_npz(trace: AttentionTrace, *, compress: bool = True, dtype: str | None = None) -> bytes:
    """The trace as the bytes of a .npz file (see the module docstring): export_bytes(trace, "npz", ...)."""
    return export_bytes(trace, "npz", compress=compress, dtype=dtype)


def trace_from_npz(data: bytes | io.IOBase) -> AttentionTrace:
    """The AttentionTrace stored by trace_to_npz (bytes or a binary file). Never unpickles."""
    source = io.BytesIO(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
    try:
        with np.load(source, allow_pickle=False) as npz:
            stored = {name: npz[name] for name in npz.files}
    except (OSError, ValueError, EOFError) as err:
        raise ValueError(f"not an mha-viz trace file (.npz): {err}") from err
    if "format" not in stored or str(stored["format"]) != FORMAT:
        raise ValueError(f"not an mha-viz trace file: expected format {FORMAT!r}")
    return AttentionTrace(
        query_tokens=tuple(str(t) for t in stored["query_tokens"]),
        key_tokens=tuple(str(t) for t in stored["key_tokens"]),
        **{name: stored[name] for name in ARRAY_FIELDS if name in stored},
        causal=bool(stored["causal"]),
        cross=bool(stored["cross"]),
        kv_heads=tuple(int(h) for h in stored["kv_heads"]) if "kv_heads" in stored else None,
        scale=float(stored["scale"]) if "scale" in stored else None,
        score_bias=_score_bias(stored),
        softcap=float(stored["softcap"]) if "softcap" in stored else None,
        meta=json.loads(str(stored["meta"])),
    )


# --------------------------------------------------------------------------------------------- JSON


def _number_texts(a: np.ndarray) -> np.ndarray:
    """Each number of a numeric array as the shortest decimal that reads back to the same value in a's
    dtype (numpy's repr: float32 0.1 -> "0.1"); non-finite entries as the JSON strings "-inf", "inf", "nan"."""
    text = a.astype(np.str_)
    if a.dtype.kind == "f":
        bad = ~np.isfinite(a)
        if bad.any():
            text = text.astype(f"<U{max(text.dtype.itemsize // 4, 6)}")  # room for '"-inf"'
            text[bad] = np.where(np.isnan(a[bad]), '"nan"', np.where(a[bad] > 0, '"inf"', '"-inf"'))
    return text


def _list_chunks(a: np.ndarray) -> Iterator[str]:
    """a as nested JSON lists, in pieces of about _CHUNK_NUMBERS numbers (rows are never split)."""
    if a.dtype.kind not in "fiu":
        yield safe_json(json.dumps(jsonable(a), ensure_ascii=False))
        return
    if a.ndim == 0:
        yield str(_number_texts(a))
        return
    if a.size == 0:
        yield json.dumps(np.zeros(a.shape).tolist())
        return
    rows = a.reshape(-1, a.shape[-1])  # (rows, last dim)
    groups = [math.prod(a.shape[j:-1]) for j in range(1, a.ndim - 1)]  # rows per list at each enclosing depth
    step = max(1, _CHUNK_NUMBERS // a.shape[-1])
    for start in range(0, len(rows), step):
        pieces = []
        for r, row in enumerate(_number_texts(rows[start : start + step]).tolist(), start):
            if r == 0:
                pieces.append("[" * (a.ndim - 1))
            else:  # close the lists that ended with row r - 1, open those that start with row r
                ended = sum(r % g == 0 for g in groups)
                pieces.append("]" * ended + "," + "[" * ended)
            pieces.append("[" + ",".join(row) + "]")
        yield "".join(pieces)
    yield "]" * (a.ndim - 1)


def _base64_chunks(a: np.ndarray) -> Iterator[str]:
    """a's bytes (C order, little-endian) as one base64 JSON string, in pieces of _CHUNK_BYTES input bytes."""
    data = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).reshape(-1).view(np.uint8)  # (nbytes,)
    yield '"'
    for start in range(0, data.size, _CHUNK_BYTES):
        yield base64.b64encode(data[start : start + _CHUNK_BYTES]).decode("ascii")
    yield '"'


def trace_header(trace: AttentionTrace, *, array_format: str = "lists", dtype: str | None = None) -> dict[str, Any]:
    """Everything of the JSON document but the arrays: tokens, flags, shapes, dtypes (as written), meta."""
    arrays = trace_arrays(trace)
    return {
        "format": FORMAT,
        "nonfinite": NONFINITE_NOTE if array_format == "lists" else BASE64_NOTE,
        "query_tokens": list(trace.query_tokens),
        "key_tokens": list(trace.key_tokens),
        "causal": bool(trace.causal),
        "cross": bool(trace.cross),
        "kv_heads": None if trace.kv_heads is None else [int(h) for h in trace.kv_heads],
        "scale": None if trace.scale is None else float(trace.scale),
        "softcap": None if trace.softcap is None else float(trace.softcap),
        "shapes": {name: [int(n) for n in a.shape] for name, a in arrays.items()},
        "dtypes": {name: str(_stored_dtype(a, dtype)) for name, a in arrays.items()},
        "array_format": array_format,
        "missing": list(trace.missing),
        "meta": jsonable(trace.meta),
    }


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def _json_head(trace: AttentionTrace, array_format: str, dtype: str | None) -> bytes:
    """The document up to the first array: one line per header key, then the opening of "arrays"."""
    header = trace_header(trace, array_format=array_format, dtype=dtype)
    lines = [f" {_dump(key)}: {_dump(value)}" for key, value in header.items()]
    return safe_json("{\n" + ",\n".join(lines) + ',\n "arrays": {\n').encode("utf-8")


def _json_key(index: int, name: str) -> bytes:
    return (",\n" if index else "").encode() + f"  {_dump(name)}: ".encode()


_JSON_TAIL = b"\n }\n}\n"


def iter_json(trace: AttentionTrace, *, array_format: str = "lists", dtype: str | None = None) -> Iterator[bytes]:
    """The JSON document (see the module docstring) as UTF-8 chunks of at most about 4 MB.

    Options are checked (ValueError) before the first chunk. Memory: one chunk, and one array's
    cast copy when dtype is stated.
    """
    _validate(trace, array_format, dtype)
    chunks = _list_chunks if array_format == "lists" else _base64_chunks
    yield _json_head(trace, array_format, dtype)
    for index, (name, a) in enumerate(stored_arrays(trace, dtype)):
        yield _json_key(index, name)
        for text in chunks(a):
            yield text.encode("utf-8")
    yield _JSON_TAIL


def write_json(trace: AttentionTrace, file: IO[bytes], *, array_format: str = "lists", dtype: str | None = None) -> None:
    """Write the JSON document to a binary file object, chunk by chunk (iter_json)."""
    for chunk in iter_json(trace, array_format=array_format, dtype=dtype):
        file.write(chunk)


def trace_to_json(trace: AttentionTrace, *, array_format: str = "lists", dtype: str | None = None) -> str:
    """The trace as one JSON object (see the module docstring); strict JSON, safe inside HTML.

    A str for convenience; export_bytes(trace, "json") spares the copy.
    """
    return export_bytes(trace, "json", array_format=array_format, dtype=dtype).decode("utf-8")


def _array_from_json(value: Any, shape: list[int], dtype: np.dtype, array_format: str) -> np.ndarray:
    if array_format == "base64":
        if not isinstance(value, str):
            raise ValueError("array_format base64: each array must be a string")
        data = base64.b64decode(value, validate=True)
        return np.frombuffer(data, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(shape)
    return np.array(value, dtype=dtype).reshape(shape)


def trace_from_json(text: str | bytes) -> AttentionTrace:
    """The AttentionTrace written by trace_to_json, either array_format (strings "-inf"/"inf"/"nan" become numbers)."""
    doc = json.loads(text)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"not an mha-viz trace (JSON): expected format {FORMAT!r}")
    array_format = doc.get("array_format", "lists")  # files written before base64 existed have no such key
    _check_options(array_format)
    arrays = {
        name: _array_from_json(values, doc["shapes"][name], np.dtype(doc["dtypes"][name]), array_format)
        for name, values in doc["arrays"].items()
    }
    return AttentionTrace(
        query_tokens=tuple(doc["query_tokens"]),
        key_tokens=tuple(doc["key_tokens"]),
        **{name: arrays[name] for name in ARRAY_FIELDS if name in arrays},
        causal=bool(doc["causal"]),
        cross=bool(doc["cross"]),
        kv_heads=None if doc["kv_heads"] is None else tuple(doc["kv_heads"]),
        scale=doc.get("scale"),
        score_bias=_score_bias(arrays),
        softcap=doc.get("softcap"),
        meta=doc["meta"],
    )


# ------------------------------------------------------------------------------------ sizes and bytes


def _lists_size(a: np.ndarray, dtype: np.dtype) -> int:
    """Bytes of a as JSON lists in dtype: exact up to SIZE_SAMPLE numbers, else brackets and commas exact
    and the numbers' length estimated from SIZE_SAMPLE entries drawn at random (seeded)."""
    if a.dtype.kind not in "fiu" or a.ndim == 0 or a.size <= SIZE_SAMPLE:
        with np.errstate(over="ignore"):
            return sum(len(text.encode("utf-8")) for text in _list_chunks(a.astype(dtype, copy=False)))
    picks = np.random.default_rng(0).integers(0, a.size, SIZE_SAMPLE)
    with np.errstate(over="ignore"):
        sample = a.reshape(-1)[picks].astype(dtype)  # (SIZE_SAMPLE,)
    digits = np.char.str_len(_number_texts(sample)).mean() * a.size
    brackets = 2 * sum(math.prod(a.shape[:depth]) for depth in range(a.ndim))  # one pair per list
    return round(digits) + brackets + a.size - 1  # commas: one between any two siblings


def export_size(trace: AttentionTrace, fmt: str, *, array_format: str = "lists", dtype: str | None = None) -> int:
    """How many bytes an export of trace will have, known before it is built (milliseconds).

    "npz": exact for an uncompressed file written to a seekable file (write_npz(..., compress=False),
    export_bytes); a compressed one is smaller (random float32 by ~8 %, causal traces by more), never
    more than 0.1 % larger. "json": exact for array_format="base64"; for "lists" exact when no array
    has more than SIZE_SAMPLE numbers, else an estimate from a random sample of each array
    (within 1 % on mha-viz's traces; tests/unit/test_export.py checks it).
    """
    _check_options(array_format, dtype)
    if fmt == "npz":
        return _npz_size(trace, dtype)
    if fmt != "json":
        raise ValueError(f"fmt must be 'npz' or 'json', got {fmt!r}")
    size = len(_json_head(trace, array_format, dtype)) + len(_JSON_TAIL)
    for index, (name, a) in enumerate(trace_arrays(trace).items()):
        target = _stored_dtype(a, dtype)
        size += len(_json_key(index, name))
        size += 2 + 4 * -(-a.size * target.itemsize // 3) if array_format == "base64" else _lists_size(a, target)
    return size


def export_bytes(
    trace: AttentionTrace,
    fmt: str,
    *,
    compress: bool = True,
    array_format: str = "lists",
    dtype: str | None = None,
) -> bytes:
    """The export ("npz" or "json") as bytes. compress: NPZ only; array_format: JSON only."""
    _check_options(array_format, dtype)
    if fmt not in ("npz", "json"):
        raise ValueError(f"fmt must be 'npz' or 'json', got {fmt!r}")
    buffer = io.BytesIO()
    if fmt == "npz":
        write_npz(trace, buffer, compress=compress, dtype=dtype)
    else:
        write_json(trace, buffer, array_format=array_format, dtype=dtype)
    return buffer.getvalue()


# ----------------------------------------------------------------------------------- names and links


def safe_filename(name: str, default: str = "mha-viz", max_chars: int = 80) -> str:
    """name reduced to [A-Za-z0-9._-]: other runs become "-", no leading dot or dash, at most max_chars.

    >>> safe_filename("all-MiniLM-L6-v2 layer 2/<script>")
    'all-MiniLM-L6-v2-layer-2-script'
    """
    cleaned = _FILENAME_BAD.sub("-", name).strip(".-_")[:max_chars].rstrip(".-_")
    return cleaned or default


def share_url(base: str | None, query: Mapping[str, str]) -> str:
    """The app's address with the view's query string: "https://host/app?h=8&text=...".

    base None (unknown address): just "?h=8&...", to append to the app's address. Values are
    percent-encoded (spaces as %20), so the link survives being pasted anywhere.
    """
    qs = urlencode(dict(query), quote_via=quote, safe="")
    if base is None:
        return f"?{qs}" if qs else ""
    base = base.split("#", 1)[0].split("?", 1)[0]
    return f"{base}?{qs}" if qs else base

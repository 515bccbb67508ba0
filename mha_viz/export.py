"""An AttentionTrace as a file: NPZ (numpy, exact) and JSON (any language), plus safe file names and share links.

NPZ (trace_to_npz / trace_from_npz), read with ``np.load(path)`` (no pickle needed):
    weights, queries, keys, values, scores, head_outputs, concat, output, W_O, b_O, W_Q, W_K, W_V, b_Q, b_K, b_V
                     every array the trace holds, in its own dtype (absent ones are left out)
    scale            0-d float64: the factor on Q K^T (absent when the trace does not say)
    query_tokens, key_tokens   unicode arrays [T], [S]
    causal, cross    0-d bool arrays         kv_heads   int64 [H], only for grouped-query attention
    meta             0-d unicode array: trace.meta as a JSON string
    format           "mha-viz-trace/1"
Tokens are numpy unicode strings, which cannot end in a NUL character ("\\x00"); mha-viz's
tokenizer drops control characters, so its tokens never do.

JSON (trace_to_json / trace_from_json): one object
    format, query_tokens, key_tokens, causal, cross, kv_heads (null: one K/V head per query head), scale,
    shapes {name: [dims]}, dtypes {name: "float32"}, missing [names], meta {...},
    arrays {name: nested lists}  (weights [H][T][S], ...; the layout of mha_viz.trace)
Numbers are the shortest decimals that read back to the same value in the array's dtype.
JSON has no infinity: a non-finite entry is written as the *string* "-inf", "inf" or "nan"
(masked scores are "-inf"); ``np.array(x, dtype=np.float32)`` turns those strings back into
numbers. The same holds for non-finite floats inside meta. Token text is kept verbatim, but
the characters < > & and U+2028/U+2029 are written as \\u escapes, so the JSON text can be
pasted inside an HTML <script> element without ending it; every JSON parser reads the
original characters back.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

import numpy as np

from .trace import AttentionTrace

FORMAT = "mha-viz-trace/1"
ARRAY_FIELDS = ("weights", "queries", "keys", "values", "scores", "head_outputs", "concat", "output", "W_O", "b_O",
                "W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V")
NONFINITE_NOTE = 'non-finite numbers are the strings "-inf", "inf", "nan" (masked scores are "-inf")'
_JSON_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_SURROGATE = re.compile("[\ud800-\udfff]")
_FILENAME_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def trace_arrays(trace: AttentionTrace) -> dict[str, np.ndarray]:
    """The arrays the trace holds, by field name (weights first; absent intermediates left out)."""
    return {name: np.asarray(getattr(trace, name)) for name in ARRAY_FIELDS if getattr(trace, name) is not None}


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


# ---------------------------------------------------------------------------------------------- NPZ


def trace_to_npz(trace: AttentionTrace, *, compress: bool = True) -> bytes:
    """The trace as the bytes of a .npz file (see the module docstring for its layout)."""
    payload: dict[str, np.ndarray] = dict(trace_arrays(trace))
    payload["query_tokens"] = np.array(trace.query_tokens, dtype=np.str_)
    payload["key_tokens"] = np.array(trace.key_tokens, dtype=np.str_)
    payload["causal"] = np.array(bool(trace.causal))
    payload["cross"] = np.array(bool(trace.cross))
    if trace.kv_heads is not None:
        payload["kv_heads"] = np.array(trace.kv_heads, dtype=np.int64)
    if trace.scale is not None:
        payload["scale"] = np.array(float(trace.scale))
    payload["meta"] = np.array(json.dumps(jsonable(trace.meta), ensure_ascii=False, allow_nan=False))
    payload["format"] = np.array(FORMAT)
    buffer = io.BytesIO()
    (np.savez_compressed if compress else np.savez)(buffer, **payload)
    return buffer.getvalue()


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
        meta=json.loads(str(stored["meta"])),
    )


# --------------------------------------------------------------------------------------------- JSON


def _json_numbers(a: np.ndarray) -> str:
    """A numeric array as nested JSON lists, each number the shortest decimal that reads back
    to the same value in a's dtype; non-finite entries as the strings "-inf", "inf", "nan"."""
    if a.dtype.kind not in "fiu":
        return json.dumps(jsonable(a))
    text = a.astype(np.str_)  # numpy's shortest round-trip repr per dtype: float32 0.1 -> "0.1"
    if a.dtype.kind == "f":
        bad = ~np.isfinite(a)
        if bad.any():
            text = text.astype(f"<U{max(text.dtype.itemsize // 4, 6)}")  # room for '"-inf"'
            text[bad] = np.where(np.isnan(a[bad]), '"nan"', np.where(a[bad] > 0, '"inf"', '"-inf"'))
    if a.ndim == 0:
        return str(text)
    if a.size == 0:
        return json.dumps(np.zeros(a.shape).tolist())
    rows = ["[" + ",".join(row) + "]" for row in text.reshape(-1, a.shape[-1]).tolist()]
    for size in reversed(a.shape[:-1]):  # group rows into their enclosing lists, innermost first
        rows = ["[" + ",".join(rows[i : i + size]) + "]" for i in range(0, len(rows), size)]
    return rows[0]


def trace_header(trace: AttentionTrace) -> dict[str, Any]:
    """Everything of the JSON document but the arrays: tokens, flags, shapes, dtypes, meta."""
    arrays = trace_arrays(trace)
    return {
        "format": FORMAT,
        "nonfinite": NONFINITE_NOTE,
        "query_tokens": list(trace.query_tokens),
        "key_tokens": list(trace.key_tokens),
        "causal": bool(trace.causal),
        "cross": bool(trace.cross),
        "kv_heads": None if trace.kv_heads is None else [int(h) for h in trace.kv_heads],
        "scale": None if trace.scale is None else float(trace.scale),
        "shapes": {name: [int(n) for n in a.shape] for name, a in arrays.items()},
        "dtypes": {name: str(a.dtype) for name, a in arrays.items()},
        "missing": list(trace.missing),
        "meta": jsonable(trace.meta),
    }


def trace_to_json(trace: AttentionTrace) -> str:
    """The trace as one JSON object (see the module docstring); strict JSON, safe inside HTML."""
    def dump(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)

    lines = [f" {dump(key)}: {dump(value)}" for key, value in trace_header(trace).items()]  # one line per key
    arrays = [f"  {dump(name)}: {_json_numbers(a)}" for name, a in trace_arrays(trace).items()]
    return safe_json("{\n" + ",\n".join(lines) + ',\n "arrays": {\n' + ",\n".join(arrays) + "\n }\n}\n")


def trace_from_json(text: str | bytes) -> AttentionTrace:
    """The AttentionTrace written by trace_to_json (strings "-inf"/"inf"/"nan" become numbers)."""
    doc = json.loads(text)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"not an mha-viz trace (JSON): expected format {FORMAT!r}")
    arrays = {
        name: np.array(values, dtype=np.dtype(doc["dtypes"][name])).reshape(doc["shapes"][name])
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
        meta=doc["meta"],
    )


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

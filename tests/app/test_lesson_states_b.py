"""Lessons 5-7 (not all heads matter, induction heads, cheaper attention for long contexts): every step's state opened
as a share link draws its page without an error, with the control, chart or view the step points at, and what is on
screen agrees with the answer the lesson calls right."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.lessons import LESSON_FILES, Step, lesson
from mha_viz.params import parse_query
from tests.app.test_gqa_app import new_app, texts
from tests.plotly_json import heatmaps, z_matrix
from tests.renderer_json import drawn_charts, drawn_heads

FILES = ("heads_matter.toml", "induction.toml", "long_contexts.toml")
STEPS = [(name, n) for name in FILES for n in range(1, len(lesson(LESSON_FILES.index(name) + 1).steps) + 1)]


def step(name: str, n: int) -> Step:
    return lesson(LESSON_FILES.index(name) + 1).steps[n - 1]


def right(name: str, n: int) -> str:
    q = step(name, n).question
    return q.choices[q.answer]


def figure(at: AppTest, key: str) -> dict:
    (match,) = [c for c in at.get("plotly_chart") if c.key == key]
    return json.loads(match.proto.spec)


def numbers(values: list | dict) -> np.ndarray:
    """A trace's array, as lists or Plotly's typed-array encoding."""
    if isinstance(values, dict):
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=np.dtype(values["dtype"])).astype(np.float64)
    return np.array(values, dtype=np.float64)


def widget_keys(at: AppTest) -> set[str]:
    kinds = ("radio", "multiselect", "select_slider", "slider", "selectbox", "segmented_control", "toggle",
             "number_input", "text_input", "checkbox")
    return {w.key for kind in kinds for w in at.get(kind) if getattr(w, "key", None)}


def view_value(at: AppTest) -> str:
    """The view the page shows: its view widget's value."""
    kinds = ("radio", "selectbox", "segmented_control", "pills")
    (value,) = [w.value for kind in kinds for w in at.get(kind) if getattr(w, "key", None) == "view"]
    return value


def next_token_bars(at: AppTest) -> tuple[dict[str, float], dict[str, float]]:
    """The knockout's next-token chart: probability by token with every head on, and with the heads off."""
    fig = figure(at, "analysis_next_token")
    on, off = (bars(bar) for bar in fig["data"][:2])
    return on, off


def bars(bar: dict) -> dict[str, float]:
    """A horizontal bar chart of tokens: probability by token (the label without its " (id)")."""
    return {re.sub(r" \(\d+\)$", "", label): float(p) for label, p in zip(bar["y"], numbers(bar["x"]))}


def top(probs: dict[str, float]) -> str:
    return max(probs, key=probs.get)


# What is on screen at each step, checked against the lesson's right answer (steps not listed: nothing to read).
def _duplicates(at: AppTest) -> None:
    (warning,) = [w.value for w in at.warning if "Near-duplicates" in w.value]
    assert str(warning.count("≈")) == right("heads_matter.toml", 1)


def _one_induction_head_off(at: AppTest) -> None:
    on, off = next_token_bars(at)
    assert top(on) == top(off) == "big" and abs(on["big"] - off["big"]) < 0.01  # "stays the same"
    assert right("heads_matter.toml", 2).startswith("It stays the same, with about")


def _previous_token_head_off(at: AppTest) -> None:
    on, off = next_token_bars(at)
    assert on["big"] > 0.99 and off.get("big", 0.0) < 0.01 and top(off) != "big"
    assert "collapses" in right("heads_matter.toml", 3)


def _one_head_kept(at: AppTest) -> None:
    on, off = next_token_bars(at)
    assert top(on) == top(off) == "big" and off["big"] > 0.5
    assert right("heads_matter.toml", 4).startswith("Yes")


def _half_a_layer_pruned(at: AppTest) -> None:
    joint = re.search(r"Change in the final hidden state\s+\*\*([\d.]+)%\*\*", texts(at))
    series = {bar["name"]: dict(zip(bar["x"], numbers(bar["y"]))) for bar in figure(at, "analysis_ranking")["data"]}
    (final,) = [s for name, s in series.items() if name.startswith("final hidden state")]
    most = max(final.values())
    assert joint is not None and abs(float(joint.group(1)) / 100 - most) < 0.03  # about the most important head alone
    assert right("heads_matter.toml", 5).startswith("as much as the one most important head")


def _greedy_first_token(at: AppTest) -> None:
    (bar,) = figure(at, "gen_probs")["data"]
    probs = bars(bar)
    assert top(probs) == right("induction.toml", 1) and probs[top(probs)] > 0.9


def _detector(kind: str, n: int) -> Callable[[AppTest], None]:
    def check(at: AppTest) -> None:
        z = z_matrix(heatmaps(figure(at, "analysis_detectors"))[0])  # (layers, heads)
        found = [f"{layer}.{head}" for layer, head in np.argwhere(z > 0.5)]
        if kind == "previous":
            assert found == [right("induction.toml", n)]
        else:
            assert found == [f"1.{h}" for h in range(4)] and right("induction.toml", n).startswith("Four")
    return check


def _logit_writers(at: AppTest) -> None:
    z = z_matrix(heatmaps(figure(at, "analysis_dla"))[0])  # (layers, heads)
    assert z[1].sum() > 10 * abs(z[0].sum())
    assert right("induction.toml", 4) == "The heads of layer 1"


def _k_composition(at: AppTest) -> None:
    z = z_matrix(heatmaps(figure(at, "analysis_composition"))[0])
    words = texts(at)
    assert "previous-token head is the earlier head whose output every induction head's keys read most" in words
    assert f"{right('induction.toml', 5)} (previous-token score" in words
    assert z.size > 0


def _induction_key(at: AppTest) -> None:
    """Why this key at the last "a" of layer 1, head 0: the key is "big", and the key-side column that adds most to
    its score is the source the lesson calls right."""
    fig = figure(at, "analysis_why_key")
    table = z_matrix(fig["data"][0])  # (sources, sources): query side x key side
    sources = fig["layout"]["xaxis"]["ticktext"]
    assert "looks at" in fig["layout"]["title"]["text"] and "(big)" in fig["layout"]["title"]["text"]
    assert right("induction.toml", 6) == f"Head {sources[int(np.argmax(table.sum(0)))]}'s output" == "Head 0.2's output"


def _kv_groups(at: AppTest) -> None:
    labels = " ".join(drawn_heads(at)[0])
    group = int(right("long_contexts.toml", 1))
    for head in range(8):
        assert f"head {head} (K/V head {head // group})" in labels


def _mqa_task(at: AppTest) -> None:
    q = step("long_contexts.toml", 2).question
    assert not q.reached(parse_query(dict(at.query_params))[0])
    at.radio(key="kv_heads").set_value(1).run()
    assert not at.exception and not at.error
    state, notices = parse_query({k: v[-1] if isinstance(v, list) else v for k, v in at.query_params.items()})
    assert not notices and q.reached(state)
    labels = " ".join(drawn_heads(at)[0])
    assert all(f"head {h} (K/V head 0)" in labels for h in range(8))  # one K/V head read by all eight


def _cache_rows(at: AppTest) -> dict[str, dict]:
    (table,) = [t.value for t in at.table if "MHA / variant cache" in t.value.columns]
    return {row["model"]: row for _, row in table.iterrows()}


def _llama_ratio(at: AppTest) -> None:
    assert _cache_rows(at)["Llama-3-8B"]["MHA / variant cache"] == "4×"
    assert right("long_contexts.toml", 3) == "4 times smaller"


def _long_context(at: AppTest) -> None:
    long = _cache_rows(at)
    at.select_slider(key="cost_context").set_value(8192).run()
    short = _cache_rows(at)
    same = [m for m in ("Llama-3-8B", "DeepSeek-V3", "Mistral-7B") if long[m]["KV cache (context)"]
            == short[m]["KV cache (context)"]]
    assert same == ["Mistral-7B"] and right("long_contexts.toml", 4).startswith("Mistral-7B")


def _latent(at: AppTest) -> None:
    words = texts(at)
    ours = re.search(r"= \*\*(\d+) numbers\*\*", words)
    mha = re.search(r"= \*\*(\d+)\*\* \(", words)
    assert ours and mha
    ratio = int(mha.group(1)) / int(ours.group(1))
    assert 5 < ratio < 10 and right("long_contexts.toml", 5) == "About 7 times"


def _reach(at: AppTest) -> None:
    assert "2 layers reach 2 · (4 − 1) = 6 tokens back" in texts(at)
    assert right("long_contexts.toml", 6) == "6 tokens"


ON_SCREEN: dict[tuple[str, int], Callable[[AppTest], None]] = {
    ("heads_matter.toml", 1): _duplicates,
    ("heads_matter.toml", 2): _one_induction_head_off,
    ("heads_matter.toml", 3): _previous_token_head_off,
    ("heads_matter.toml", 4): _one_head_kept,
    ("heads_matter.toml", 5): _half_a_layer_pruned,
    ("induction.toml", 1): _greedy_first_token,
    ("induction.toml", 2): _detector("previous", 2),
    ("induction.toml", 3): _detector("induction", 3),
    ("induction.toml", 4): _logit_writers,
    ("induction.toml", 5): _k_composition,
    ("induction.toml", 6): _induction_key,
    ("long_contexts.toml", 1): _kv_groups,
    ("long_contexts.toml", 2): _mqa_task,
    ("long_contexts.toml", 3): _llama_ratio,
    ("long_contexts.toml", 4): _long_context,
    ("long_contexts.toml", 5): _latent,
    ("long_contexts.toml", 6): _reach,
}


@pytest.mark.parametrize("name, n", STEPS)
def test_each_step_opens_its_state_with_its_target_on_screen_and_its_answer_true(name: str, n: int) -> None:
    s = step(name, n)
    at = new_app(**s.state).run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert not [w.value for w in at.warning if "URL parameter" in w.value]  # the link is taken as it is
    kind, target = s.target_kind, s.target_name
    if kind == "control":
        assert target in widget_keys(at), (target, widget_keys(at))
    elif kind == "chart":
        assert target in drawn_charts(at)
    else:
        assert view_value(at) == target
    ON_SCREEN[(name, n)](at)


def test_every_step_has_an_on_screen_check() -> None:
    assert set(ON_SCREEN) == set(STEPS)

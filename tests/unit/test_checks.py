"""A failed self-check speaks up: a tiny random GPT-2 whose adapter reads layer 1's scale wrong (twice the model's) is
traced; the library warns (TraceCheckWarning) or with strict=True raises TraceCheckError, the HTML report marks the
check FAILED, the notebook widget carries the failure, the CLI exits 3. Gemma 3 with attn_logit_softcapping set in its
config: transformers does not cap its scores, and neither does the trace (the old capping fails the check)."""

from __future__ import annotations

import re
import warnings
from dataclasses import replace

import numpy as np
import pytest
import transformers as tf
from transformers import AutoModel, AutoTokenizer

import mha_viz
import mha_viz.pretrained
from mha_viz import AttentionTrace, TraceCheckError, TraceCheckWarning
from mha_viz.__main__ import main
from mha_viz.checks import FLOOR, failure_message, failures, tolerance
from mha_viz.pretrained import PretrainedModel, bundled_model_dir
from mha_viz.pretrained.architectures import ADAPTERS, adapter_for
from mha_viz.report import html_report
from mha_viz.widget import show
from tests.tiny_causal import build_lm, random_model

TEXT = "the cat sat on the mat because it was tired"
V = 30522


class WrongScaleOnLayer1(ADAPTERS["gpt2"]):
    """GPT-2's adapter with layer 1's scale doubled: an adapter that departs from the model's code in one layer."""

    def scale(self, site):
        right = super().scale(site)
        return 2 * right if site.attention is self.site("decoder", 1).attention else right


def wrong_model(**kwargs) -> PretrainedModel:
    model = PretrainedModel(build_lm("gpt2"), AutoTokenizer.from_pretrained(bundled_model_dir()), name="tiny-gpt2",
                            **kwargs)
    model.adapter = WrongScaleOnLayer1(model.model)
    return model


@pytest.fixture(scope="module")
def wrong() -> PretrainedModel:
    return wrong_model()


def quiet_traces(model) -> tuple[AttentionTrace, ...]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceCheckWarning)
        return model.traces(TEXT)


def test_a_wrong_layer_warns_with_its_difference_and_tolerance(wrong):
    with warnings.catch_warnings():
        warnings.simplefilter("error", TraceCheckWarning)
        good = wrong.trace(TEXT, 0)  # layer 0 is right: no warning
    assert failures(good) == [] and failure_message(good) is None
    with pytest.warns(TraceCheckWarning) as caught:
        bad = wrong.trace(TEXT, 1)
    (failed_weights, *_) = failures(bad)
    assert failed_weights.label == "weights vs output_attentions"
    assert failed_weights.error == bad.meta["check"]["weights vs output_attentions"] > 1e-2
    assert failed_weights.tolerance == FLOOR
    message = str(caught[0].message)
    assert "tiny-gpt2, decoder layer 1" in message and f"{failed_weights.error:.3g}" in message
    assert "tolerance 0.0001" in message
    assert caught[0].filename == __file__  # the warning points at the caller's line
    with pytest.warns(TraceCheckWarning, match="decoder layer 1") as caught:
        wrong.traces(TEXT)
    assert len(caught) == 1  # layer 0 passes


def test_strict_raises_instead(wrong):
    with pytest.raises(TraceCheckError, match=r"layer 1: .*weights vs output_attentions: max \|difference\|"):
        wrong.trace(TEXT, 1, strict=True)
    with pytest.raises(TraceCheckError):
        wrong.traces(TEXT, strict=True)
    strict = wrong_model(strict=True)
    with pytest.raises(TraceCheckError, match="tolerance"):
        strict.trace(TEXT, 1)
    assert failures(strict.trace(TEXT, 0)) == []  # a passing layer comes back as usual
    with pytest.warns(TraceCheckWarning):
        strict.trace(TEXT, 1, strict=False)


def test_load_model_passes_strict_on(monkeypatch):
    model = mha_viz.load_model(mha_viz.INDUCTION_MODEL, strict=True)
    assert model.strict is True
    model.adapter = WrongScaleOnLayer1(model.model)
    try:
        with pytest.raises(TraceCheckError):
            model.trace("red fox blue sky red", 1)
    finally:
        model.adapter = adapter_for(model.model)
        model.strict = False


def test_the_tolerance_scales_with_the_dtype_and_the_numbers():
    weights = np.full((1, 2, 2), 0.5, np.float32)
    output = np.array([[3.0, -40.0], [1.0, 2.0]], np.float32)
    check = {"weights vs output_attentions": 5e-5, "concat @ W_O^T + b vs output": 3e-3}
    trace = AttentionTrace(("a", "b"), ("a", "b"), weights, output=output, meta={"check": check})
    assert tolerance(trace, "weights vs output_attentions") == FLOOR
    assert tolerance(trace, "concat @ W_O^T + b vs output") == pytest.approx(FLOOR * 40)
    assert failures(trace) == []
    half = replace(trace, meta={**trace.meta, "model_dtype": "bfloat16", "check": {**check, "weights vs x": 0.05}})
    assert tolerance(half, "weights vs x") == 16 * 2**-7 and failures(half) == []
    broken = replace(trace, meta={"check": {**check, "head outputs vs concat": float("nan")}})
    assert [f.label for f in failures(broken)] == ["head outputs vs concat"]  # NaN is no pass
    exported = replace(trace, meta={"check": {"weights vs output_attentions": "NaN"}})  # JSON export writes "NaN"
    assert len(failures(exported)) == 1


def test_a_check_of_a_quantity_the_trace_does_not_keep_scales_with_that_quantity():
    """A mixer's M @ values can be far larger than anything the trace keeps (MiniMax's reaches 1e3 where its normed
    head outputs stay near 1): meta["check_scale"] gives that check its own magnitude, and nothing else moves."""
    weights = np.full((1, 2, 2), 0.5, np.float32)
    label = "mixing matrix @ values vs the mixer's own output"
    check = {label: 8e-4, "head outputs vs concat": 1e-6}
    trace = AttentionTrace(("a", "b"), ("a", "b"), weights, output=np.ones((2, 2), np.float32), meta={"check": check})
    assert [f.label for f in failures(trace)] == [label]  # 8e-4 > 1e-4 x 1: the trace's own vectors are ~1
    scaled = replace(trace, meta={**trace.meta, "check_scale": {label: 1030.5}})
    assert tolerance(scaled, label) == pytest.approx(FLOOR * 1030.5) and failures(scaled) == []
    assert tolerance(scaled, "head outputs vs concat") == FLOOR


def test_the_report_says_failed_not_rounding(wrong):
    good, bad = quiet_traces(wrong)
    page = without_scripts(html_report(bad, title="wrong"))
    assert 'role="alert"' in page and "Self-check failed" in page and "FAILED" in page
    assert "float rounding only" not in page
    assert f"{bad.meta['check']['weights vs output_attentions']:.2e}" in page and "1.00e-04" in page
    page = without_scripts(html_report(good, title="right"))
    assert "float rounding only" in page and "FAILED" not in page and "Self-check failed" not in page


def without_scripts(page: str) -> str:
    """The report's own text: the inlined plotly.js may hold any word (plotly 7.0's holds "FAILED")."""
    return re.sub(r"<script\b.*?</script>", "", page, flags=re.DOTALL)


def test_the_widget_carries_the_failure_of_its_layer(wrong):
    traces = quiet_traces(wrong)
    widget = show(list(traces))
    assert set(widget.failed_checks) == {"1"}
    assert widget.failed_checks["1"] == failure_message(traces[1])
    assert "decoder layer 1" in widget.static_html()  # the exported notebook's copy says it too
    with pytest.warns(TraceCheckWarning):
        assert set(show(wrong, TEXT).failed_checks) == {"1"}
    assert show(list(quiet_traces(PretrainedModel(build_lm("gpt2"), wrong.tokenizer)))).failed_checks == {}


@pytest.mark.parametrize("command", ["report", "figure"])
def test_the_cli_exits_3_and_says_why(tmp_path, capsys, monkeypatch, wrong, command):
    monkeypatch.setattr(mha_viz.pretrained, "load_model", lambda *a, **k: wrong)
    out = tmp_path / ("r.html" if command == "report" else "heads.svg")
    args = [command, "--model", "tiny", "--layer", "1", "--text", TEXT, "--out", str(out)]
    assert main(args) == 3
    _, err = capsys.readouterr()
    (line,) = err.strip().splitlines()
    assert line.startswith(f"python -m mha_viz {command}: error: Self-check failed for tiny-gpt2, decoder layer 1")
    assert "tolerance" in line and "Nothing was written" in line and not out.exists()
    if command == "report":  # (a figure is refused the same way; writing one needs kaleido's Chromium)
        assert main([*args[:4], "0", *args[5:]]) == 0 and out.exists()  # layer 0 passes its check
        out.unlink()
        assert main([*args, "--allow-failed-check"]) == 3
        _, err = capsys.readouterr()
        assert "Written anyway" in err and "FAILED" in out.read_text(encoding="utf-8")


GEMMA3 = dict(vocab_size=V, num_key_value_heads=2, head_dim=8, sliding_window=4, query_pre_attn_scalar=8,
              layer_types=["sliding_attention", "full_attention"], hidden_size=32, num_hidden_layers=2,
              num_attention_heads=4, intermediate_size=64, max_position_embeddings=64, pad_token_id=0,
              bos_token_id=101, eos_token_id=102)


def test_gemma3_follows_its_model_where_the_config_sets_softcapping():
    """transformers' Gemma3Attention does not pass attn_logit_softcapping to its attention function: the trace equals
    output_attentions (eager) uncapped; capping as Gemma2 does (the old adapter) fails the check and warns."""
    config = tf.Gemma3TextConfig(**GEMMA3, attn_logit_softcapping=1.0)
    model = PretrainedModel(random_model(AutoModel, config), AutoTokenizer.from_pretrained(bundled_model_dir()))
    assert model.model.config._attn_implementation == "eager"
    own = model.attentions(TEXT)  # (layers, H, T, T)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TraceCheckWarning)
        traces = model.traces(TEXT)
    for t, reference in zip(traces, own, strict=True):
        assert t.softcap is None and np.abs(t.weights - reference).max() <= 1e-5 and failures(t) == []
        assert np.nanmax(np.abs(np.where(np.isfinite(t.scores), t.scores, np.nan))) > 1.0  # uncapped: beyond c

    class CappingGemma3(ADAPTERS["gemma3_text"]):  # the old behaviour: Gemma2's capping inherited
        caps_scores = True

    model.adapter = CappingGemma3(model.model)
    with pytest.warns(TraceCheckWarning, match="weights vs output_attentions") as caught:
        capped = model.traces(TEXT)
    assert len(caught) == 2 and all(t.softcap == 1.0 and failures(t) for t in capped)
    assert max(np.abs(t.weights - reference).max() for t, reference in zip(capped, own, strict=True)) > 0.1


def test_gemma2_caps_its_scores_as_its_model_does():
    config = tf.Gemma2Config(**{k: v for k, v in GEMMA3.items() if k != "layer_types"}, attn_logit_softcapping=1.0)
    model = PretrainedModel(random_model(AutoModel, config), AutoTokenizer.from_pretrained(bundled_model_dir()))
    own = model.attentions(TEXT)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TraceCheckWarning)
        traces = model.traces(TEXT)
    for t, reference in zip(traces, own, strict=True):
        assert t.softcap == 1.0 and np.abs(t.weights - reference).max() <= 1e-5
        assert np.nanmax(np.abs(np.where(np.isfinite(t.scores), t.scores, np.nan))) <= 1.0  # capped at c

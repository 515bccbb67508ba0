"""Analysis -> Why this key (AppTest): on induction-2l the section splits the induction heads' score at the repeated
token into the library's terms, says in words what carries it, draws the head's pattern with a click target on every
cell the query sees and the explained cell outlined, follows the query, key and head controls and a link;
bad link values are replaced with a notice; a model or layer it cannot split says why; the configurable layer's MLA
and differential variants are split (a differential head map by map)."""

from __future__ import annotations

import numpy as np
import pytest

from mha_viz.analysis import score_attribution
from mha_viz.params import CAUSAL_EXAMPLE
from mha_viz.pretrained import INDUCTION_MODEL, load_model
from mha_viz.ui.text import plain
from tests.app.test_app import new_app, z_matrix
from tests.app.test_generate_app import chart

pytestmark = pytest.mark.usefixtures("one_thread")
CAUSAL = {"mode": "Pretrained", "model": INDUCTION_MODEL, "text": CAUSAL_EXAMPLE, "view": "Analysis",
          "section": "Why this key", "layer": "1"}


def test_the_induction_heads_key_is_split_as_the_library_splits_it() -> None:
    at = new_app(**CAUSAL).run()
    assert not at.exception and not at.error and not at.warning
    tokens = load_model(INDUCTION_MODEL).tokens(CAUSAL_EXAMPLE)
    query = len(tokens) - 1  # the last "a": the token after the first "a" is "big"
    assert at.selectbox(key="why_query").value == query and at.selectbox(key="why_key").value is None
    sa = score_attribution(load_model(INDUCTION_MODEL), CAUSAL_EXAMPLE, layer=1, head=0, query=query)
    assert tokens[sa.winner] == "big"
    fig = chart(at, "analysis_why_key")
    z = z_matrix(fig["data"][0])
    assert z.shape == (len(sa.sources),) * 2 and abs(z - sa.table(sa.winner)).max() < 1e-5  # float32 on the wire
    assert [t for t in fig["layout"]["yaxis"]["ticktext"]] == list(sa.sources)
    sentence = " ".join(m.value for m in at.markdown)
    a, b, _ = sa.largest(sa.winner, 1)[0]
    assert f"(query: **{a}**) × (key: **{b}**)" in sentence and f"key {sa.winner} (**big**)" in sentence
    assert any("add up to" in c.value and "frozen" in c.value for c in at.caption)


def test_the_controls_and_a_link_pick_the_query_key_and_head() -> None:
    at = new_app(**CAUSAL, why_query="5", why_key="2", head="3").run()
    assert not at.exception and not at.warning
    pattern = chart(at, "analysis_why_pattern")  # head 3's weights, every seen (query, key) a click target
    T = len(load_model(INDUCTION_MODEL).tokens(CAUSAL_EXAMPLE))
    (picker,) = [t for t in pattern["data"] if t.get("name") == "pick a cell"]
    cells = z_matrix({"z": picker["customdata"]}).astype(int).tolist()
    assert cells == [[i, j] for i in range(T) for j in range(i + 1)]  # causal: the keys up to the query
    (outline,) = pattern["layout"]["shapes"]
    assert (outline["x0"], outline["y0"]) == (1.5, 4.5)  # key 2, query 5
    assert (at.selectbox(key="why_query").value, at.selectbox(key="why_key").value, at.selectbox(key="head").value) == (
        5, 2, 3)
    sa = score_attribution(load_model(INDUCTION_MODEL), CAUSAL_EXAMPLE, layer=1, head=3, query=5)
    assert abs(z_matrix(chart(at, "analysis_why_key")["data"][0]) - sa.table(2)).max() < 1e-5
    at.selectbox(key="why_key").set_value(4).run()
    assert abs(z_matrix(chart(at, "analysis_why_key")["data"][0]) - sa.table(4)).max() < 1e-5
    assert at.query_params["why_key"] == "4"  # the link follows


@pytest.mark.parametrize("params, notice", [({"why_query": "400"}, "why_query"), ({"why_key": "9", "why_query": "3"},
                                                                                    "why_key")])
def test_a_link_with_a_position_the_text_lacks_is_corrected_with_a_notice(params, notice) -> None:
    at = new_app(**CAUSAL, **params).run()
    assert not at.exception and not at.error and at.get("plotly_chart")
    assert any(f"URL parameter {notice}" in w.value.replace("\\_", "_") for w in at.warning)


def test_the_bundled_encoder_is_split_through_its_post_norms() -> None:
    at = new_app(mode="Pretrained", view="Analysis", section="Why this key", layer="3").run()  # MiniLM
    assert not at.exception and not at.warning
    model = load_model(None)
    query, head = at.selectbox(key="why_query").value, at.selectbox(key="head").value
    sa = score_attribution(model, model_text(at), layer=3, head=head, query=query)
    assert sa.sources[:3] == ("token", "token type", "position") and "2 MLP" in sa.sources
    assert abs(z_matrix(chart(at, "analysis_why_key")["data"][0]) - sa.table(sa.winner)).max() < 1e-5
    assert any("post-norm stack" in c.value for c in at.caption)


@pytest.fixture(scope="module")
def seq2seq_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Tiny random T5 and BART saved with the bundled tokenizer, as the app loads a model."""
    from transformers import AutoModel

    from tests.tiny_causal import saved_random_models
    from tests.unit.test_pretrained_tiny import CONFIGS

    return saved_random_models({name: CONFIGS[name] for name in ("t5", "bart")}, AutoModel, tmp_path_factory)


@pytest.mark.parametrize("name", ["t5", "bart"])
def test_an_encoder_decoders_two_stacks_are_split_and_cross_attention_says_why(seq2seq_folders, name) -> None:
    """The part control picks the stack: the decoder's table is the library's split of the decoder's self-attention
    on the context (the decoder text), the encoder's of the text; cross-attention's is (decoder source x encoder
    source), its keys the encoder's tokens."""
    text, context = "the cat sat on the mat", "a dog ran"
    at = new_app(mode="Pretrained", view="Analysis", section="Why this key", layer="1", text=text).run()
    at.text_input(key="model").set_value(seq2seq_folders[name]).run()
    at.text_area(key="context").set_value(context).run()
    model = load_model(seq2seq_folders[name])
    for part in ("encoder", "decoder"):  # the decoder's 5 tokens: the query (last of the encoder's 8) follows them
        at.radio(key="part").set_value(part).run()
        assert not at.exception and not at.error and not any("Cannot split" in w.value for w in at.warning), part
        query, head = at.selectbox(key="why_query").value, at.selectbox(key="head").value
        sa = score_attribution(model, text, layer=1, head=head, query=query, part=part, decoder_text=context)
        assert ("0 cross.0" in sa.sources) == (part == "decoder")
        assert abs(z_matrix(chart(at, "analysis_why_key")["data"][0]) - sa.table(sa.winner)).max() < 1e-5
    at.radio(key="part").set_value("cross").run()
    assert not at.exception and not at.error and not any("Cannot split" in w.value for w in at.warning)
    query, head = at.selectbox(key="why_query").value, at.selectbox(key="head").value
    sa = score_attribution(model, text, layer=1, head=head, query=query, part="cross", decoder_text=context)
    assert sa.key_tokens == tuple(model.tokens(text)) and len(sa.keys) == len(sa.key_tokens) != len(sa.tokens)
    fig = chart(at, "analysis_why_key")
    z = z_matrix(fig["data"][0])
    assert z.shape == (len(sa.sources), len(sa.key_sources)) and abs(z - sa.table(sa.winner)).max() < 1e-5
    assert fig["layout"]["xaxis"]["ticktext"] == list(sa.key_sources)
    said = " ".join(m.value for m in at.markdown)  # the key named by the encoder's token, the query the decoder's
    assert f"key {sa.winner} (**{plain(model.tokens(text)[sa.winner])}**)" in said and f"Query {query} (**" in said
    drop = int(np.argmin(sa.removed[:, sa.winner]))  # rows: each query source but "bias", then each key source's
    side, source = ("query", sa.sources[drop]) if drop < len(sa.sources) - 1 else (
        "key", sa.key_sources[drop - len(sa.sources) + 1])
    if sa.weights[sa.winner] - sa.removed[drop, sa.winner] > 1e-3:
        assert f"Taking **{plain(source)} ({side} side)** out" in said


def model_text(at) -> str:
    from mha_viz.params import DEFAULT_TEXT

    return at.query_params.get("text", DEFAULT_TEXT)


def test_a_trained_layer_splits_by_its_embeddings() -> None:
    at = new_app(view="Analysis", section="Why this key", weights="trained").run()  # token and position embeddings
    assert not at.exception and not at.warning
    fig = chart(at, "analysis_why_key")
    assert list(fig["layout"]["yaxis"]["ticktext"]) == ["token", "position", "bias"]
    assert any("no norm" in c.value and "trained layer" in c.value for c in at.caption)


@pytest.mark.parametrize("kind", ["mla", "diff"])
def test_the_configurable_mla_and_differential_layers_are_split(kind: str) -> None:
    """MLA (its latent's RMSNorm frozen) draws the library's table; a differential head draws one table per map, the
    library's split of query heads h and h + H, for the key its differential weights pick."""
    import numpy as np

    from mha_viz.config import MHAConfig
    from mha_viz.params import DEFAULT_TEXT
    from mha_viz.sources import configurable_score_attribution, configurable_trace
    from mha_viz.variants import LayerVariant

    at = new_app(view="Analysis", section="Why this key", causal="true", variant=kind).run()
    assert not at.exception and not at.warning
    query, head = at.selectbox(key="why_query").value, at.selectbox(key="head").value
    cfg, variant = MHAConfig(at.session_state["d_model"], at.session_state["h"]), LayerVariant(kind)
    trace = configurable_trace(DEFAULT_TEXT, cfg, causal=True, variant=variant)
    key = int(np.argmax(trace.weights[head, query]))
    H = trace.num_heads
    tables = {"analysis_why_key": head} | ({"analysis_why_key_map2": head + H} if kind == "diff" else {})
    for name, h in tables.items():
        sa = configurable_score_attribution(DEFAULT_TEXT, cfg, head=h, query=query, causal=True, variant=variant)
        assert abs(z_matrix(chart(at, name)["data"][0]) - sa.table(key)).max() < 1e-5
    if kind == "mla":
        assert any("latent RMSNorms" in c.value for c in at.caption)
    else:
        assert ", map 2:" in chart(at, "analysis_why_key_map2")["layout"]["title"]["text"]
        assert any("Map 2" in m.value and f"{trace.lambdas[head]:.3f}" in m.value for m in at.markdown)


def test_the_configurable_layer_splits_by_token_and_position() -> None:
    """The default page's layer: its input is token vectors plus the positional encoding, and the table is the
    library's split of the same layer (token, position, bias on each side)."""
    from mha_viz.config import MHAConfig
    from mha_viz.params import DEFAULT_TEXT
    from mha_viz.sources import configurable_score_attribution

    at = new_app(view="Analysis", section="Why this key", causal="true").run()
    assert not at.exception and not at.warning
    query, head = at.selectbox(key="why_query").value, at.selectbox(key="head").value
    state = at.session_state
    sa = configurable_score_attribution(DEFAULT_TEXT, MHAConfig(state["d_model"], state["h"]), head=head, query=query,
                                        causal=True)
    z = z_matrix(chart(at, "analysis_why_key")["data"][0])
    assert sa.sources == ("token", "position", "bias") and abs(z - sa.table(sa.winner)).max() < 1e-5
    assert any("no norm" in c.value for c in at.caption)


def test_a_hybrids_attention_layer_is_split_and_its_mixer_layer_says_why_not() -> None:
    params = {"mode": "Pretrained", "model": "mha-viz/hybrid-2l", "view": "Analysis", "section": "Why this key",
              "text": CAUSAL_EXAMPLE}
    at = new_app(**params, layer="1").run()
    assert not at.exception and not at.warning
    sa = score_attribution(load_model("mha-viz/hybrid-2l"), CAUSAL_EXAMPLE, layer=1, head=0,
                           query=len(load_model("mha-viz/hybrid-2l").tokens(CAUSAL_EXAMPLE)) - 1)
    assert abs(z_matrix(chart(at, "analysis_why_key")["data"][0]) - sa.table(sa.winner)).max() < 1e-5
    at = new_app(**params, layer="0").run()
    assert not at.exception and not at.warning
    assert any("layer 0 is a linear mixer" in i.value and "(1)" in i.value for i in at.info)


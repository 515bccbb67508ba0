"""The Formulas view's lines for each attention variant carry the variant's live sizes and its own terms."""

from __future__ import annotations

from mha_viz.config import MHAConfig
from mha_viz.formulas import variant_formulas

CFG = MHAConfig(64, 4)  # d_k = d_v = 16


def test_mla_lines_name_the_cached_latent_its_width_and_the_absorbed_product() -> None:
    lines = variant_formulas("mla", CFG, 5, kv_latent=12, rope_dim=6, q_latent=0)
    text = "\n".join(lines)
    assert r"\mathbb{R}^{5 \times 12}" in text and "12 + 6 numbers a token" in text
    assert r"\sqrt{22}" in text  # scores scaled by 1/sqrt(rope_dim + d_k)
    assert "W^{UK" in text and "RoPE" in text
    no_rope = "\n".join(variant_formulas("mla", CFG, 5, kv_latent=12, rope_dim=0, q_latent=8))
    assert r"\mathrm{RoPE}(q^R_h)" not in no_rope and "W^{DQ}" in no_rope and r"\sqrt{16}" in no_rope


def test_window_lines_follow_the_mask_and_the_sink_kind() -> None:
    causal = variant_formulas("window", CFG, 5, causal=True, window=3, sinks="none")
    assert causal == [(r"M_{ij} = 0 \text{ if } i - 3 < j \le i \text{ else } -\infty \quad \text{(each query sees at "
                      r"most 3 keys)}")]
    both = variant_formulas("window", CFG, 5, causal=False, window=3, sinks="logit")
    assert "|i - j| < 3" in both[0] and "at most 5 keys" in both[0] and "z_h" in both[1]
    assert "first 4 tokens" in variant_formulas("window", CFG, 5, window=3, sinks="tokens")[1]


def test_diff_lines_pair_head_i_with_head_i_plus_h_over_2() -> None:
    text = "\n".join(variant_formulas("diff", MHAConfig(64, 8), 5))
    assert "Q_{i+4}" in text and r"i = 0, \dots, 3" in text and r"\mathbb{R}^{5 \times 16}" in text  # 2 d_v = 16
    assert "i = 0" in variant_formulas("diff", MHAConfig(64, 2), 5)[0]


def test_moh_lines_show_top_k_and_the_shared_heads_only_when_there_are_some() -> None:
    routed = variant_formulas("moh", CFG, 5, moh_k=3, moh_shared=0)
    assert len(routed) == 2 and "top}\\text{-}3" in routed[0] and "alpha" not in routed[0]
    shared = variant_formulas("moh", CFG, 5, moh_k=1, moh_shared=2)
    assert len(shared) == 3 and "h < 2" in shared[1] and r"h \ge 2" in shared[0]


def test_mha_and_gqa_have_no_extra_lines() -> None:
    assert variant_formulas("mha", CFG, 5) == variant_formulas("gqa", CFG, 5, kv_heads=2) == []

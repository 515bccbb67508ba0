"""Circuits, composition and patching: time and memory on the bundled models and a GPT-2-small-sized random model.

    python bench/bench_circuits.py            all three models
    python bench/bench_circuits.py --small    the bundled models only

For each model: HeadWeights (every head's weights, norms folded), every head's copying score, one head's OV circuit
(whole table for a small vocabulary, 32 sampled rows with their top 10 otherwise), the K-composition scores with their
random baseline, and on the causal models activation patching of every head's output and a path-patching scan. Each
step prints its wall time and the peak of numpy memory it allocated (tracemalloc sees numpy's buffers, not torch's),
and the process's peak RSS after it. Two choices of the library are measured side by side with what they avoid:
composition from factors against the dense [d_model, d_model] products, and copying scores from the small
d_v x d_v matrix against the eigenvalues of the full [V, V] circuit (where V is small enough to try).
The GPT-2-small-sized model (12 layers x 12 heads, d_model 768, vocabulary 50257) has random weights built from its
config: nothing is downloaded; its vocabulary is labelled with the MiniLM tokenizer's 30522 tokens and ids above.
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np


def measure(what: str, run: Callable[[], Any]) -> Any:
    tracemalloc.start()
    start = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  {what:<58} {seconds:8.3f} s   numpy peak {peak / 2**20:8.1f} MiB   process peak RSS {rss:7.0f} MiB")
    return result, seconds


def dense_composition(w: Any) -> np.ndarray:
    """K-composition from the dense [d_model, d_model] products W_OV and W_QK^T (what the library avoids)."""
    L, H = w.num_layers, w.num_heads
    scores = np.zeros((L, H, L, H))
    for l1 in range(L):
        for h1 in range(H):
            A = w.W_OV(l1, h1)
            for l2 in range(l1 + 1, L):
                for h2 in range(H):
                    B = w.W_QK(l2, h2).T
                    scores[l1, h1, l2, h2] = np.linalg.norm(A @ B) / (np.linalg.norm(A) * np.linalg.norm(B))
    return scores


def full_copying(w: Any) -> np.ndarray:
    """Copying scores from the eigenvalues of every head's full [V, V] circuit W_E W_OV W_U (what the library avoids)."""
    out = np.zeros((w.num_layers, w.num_heads))
    for layer in range(w.num_layers):
        for head in range(w.num_heads):
            eig = np.linalg.eigvals(w.W_E.astype(np.float64) @ w.W_OV(layer, head) @ w.W_U.astype(np.float64))
            eig = eig[np.abs(eig) > 1e-9 * np.abs(eig).max()]
            out[layer, head] = float((eig.real > 0).mean())
    return out


def gpt2_small() -> Any:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config

    from mha_viz.pretrained import PretrainedModel, bundled_model_dir

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(GPT2Config(), attn_implementation="eager")  # 124M parameters, random
    return PretrainedModel(model, AutoTokenizer.from_pretrained(bundled_model_dir()), name="gpt2-small-sized (random)")


def bench(model: Any, *, patching: bool) -> None:
    from mha_viz.analysis import (
        activation_patching,
        composition,
        composition_scores,
        copying_scores,
        ov_circuit,
        pairs_for,
    )

    print(f"\n{model.name}: {model.num_layers[model.parts[0]]} layers x {model.num_heads[model.parts[0]]} heads")
    w, _ = measure("head_weights (norms folded, embeddings, unembedding)", model.head_weights)
    held = sum(a.nbytes for a in (w.W_Q, w.W_K, w.W_V, w.W_O, w.W_E, w.W_U, w.W_pos) if a is not None)
    print(f"  {'':<58} HeadWeights holds {held / 2**20:.1f} MiB of arrays")
    measure("copying_scores (eigenvalues of the d_v x d_v matrix)", lambda: copying_scores(w))
    small = w.W_E.shape[0] <= 512
    measure(f"ov_circuit, one head ({'whole table' if small else '32 sampled rows, top 10'})",
            lambda: ov_circuit(w, 0, 0) if small else ov_circuit(w, 0, 0, sample=32, top_k=10))
    measure("composition 'k' with its random baseline (64 draws)", lambda: composition(w, "k"))
    factored, fast = measure("K-composition scores, factored (the library)", lambda: composition_scores(w, "k"))
    if w.d_model <= 384:
        dense, slow = measure("K-composition scores, dense d_model x d_model products", lambda: dense_composition(w))
        print(f"  {'':<58} dense / factored time: {slow / fast:.1f}x; max difference {np.abs(dense - factored).max():.1e}")
    if small and w.W_U is not None:
        fast_scores, fast = measure("copying_scores again (for the ratio)", lambda: copying_scores(w).scores)
        full, slow = measure("copying scores from the full V x V circuits' eigenvalues", lambda: full_copying(w))
        print(f"  {'':<58} full / small time: {slow / fast:.1f}x; scores equal: {np.allclose(full, fast_scores, atol=1e-6)}")
    if patching:
        pair = next(iter(pairs_for(model.name).values()))
        result, _ = measure(f"activation_patching, site head ({pair.name!r})",
                            lambda: activation_patching(model, pair.clean, pair.corrupted, answer=pair.answer,
                                                        wrong=pair.wrong))
        print(f"  {'':<58} {result.scores.size} patched runs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="the bundled models only")
    args = parser.parse_args()
    from mha_viz import INDUCTION_MODEL, load_model

    bench(load_model(INDUCTION_MODEL), patching=True)
    bench(load_model(), patching=False)
    if not args.small:
        bench(gpt2_small(), patching=False)


if __name__ == "__main__":
    main()

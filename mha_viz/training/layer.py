"""A trained one-layer model as data: its weights and scores, ready to trace any sequence of the task."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..trace import AttentionTrace
from ..variants import NAMES as VARIANT_NAMES
from ..variants import VARIANTS, LayerVariant
from ..weights import HeadWeights, per_head_out
from .model import TinyAttentionModel
from .tasks import get_task

MHA = LayerVariant()  # the default attention layer: multi-head attention


@dataclass(frozen=True, eq=False)
class TrainedLayer:
    """The model `train(task, num_heads, d_model, steps, seed, variant=, diversity=, diversity_kind=)` ends with,
    and how well it does.

    state: TinyAttentionModel.state_dict() as numpy arrays; loss, accuracy [R] and scores [H, R]
    are measured on the trainer's fixed evaluation batch (see trainer.py).
    """

    task: str
    num_heads: int
    d_model: int
    seed: int
    steps: int
    relations: tuple[str, ...]
    loss: float
    accuracy: np.ndarray  # [R]
    scores: np.ndarray  # [H, R]
    state: dict[str, np.ndarray]
    variant: LayerVariant = MHA
    diversity: float = 0.0
    diversity_kind: str = "outputs"
    cut: bool = False  # its training was stopped by a time budget: steps is where it stopped, not what was asked

    @property
    def mean_accuracy(self) -> float:
        return float(self.accuracy.mean())

    def model(self) -> TinyAttentionModel:
        """A fresh TinyAttentionModel holding these weights."""
        spec = get_task(self.task)
        model = TinyAttentionModel(len(spec.vocab), spec.seq_len, self.d_model, self.num_heads, len(spec.relations),
                                   seed=self.seed, variant=self.variant)
        model.load_state_dict({name: torch.from_numpy(np.array(a)) for name, a in self.state.items()})
        return model.eval()

    def head_weights(self, part: str | None = None) -> HeadWeights:
        """The attention layer's W_Q, W_K, W_V, W_O with the token and position embeddings (mha_viz.weights); no
        norm to fold, and no unembedding: each relation has its own readout (state["readout.weight"]).
        Grouped-query K/V weights are repeated for the query heads of their group. Window and MoH layers have MHA's
        per-head weights (what they add, the band and sink logits or the router's gates, is not in them). MLA and
        differential layers: ValueError saying why (MHA, GQA, window and MoH layers give head weights)."""
        why = self.variant.spec.training.unsplit
        if why:
            split = [s.name for s in VARIANTS.values() if not s.training.unsplit]
            raise ValueError(f"the weights of a trained {VARIANT_NAMES[self.variant.kind]} layer do not split into "
                             f"per-head W_Q, W_K, W_V, W_O ({why}): only {', '.join(split[:-1])} and {split[-1]} "
                             "layers give head weights")
        spec = get_task(self.task)
        a = {name.removeprefix("attention."): np.asarray(x, dtype=np.float32) for name, x in self.state.items()}
        group = self.num_heads // a["W_K"].shape[0]  # query heads per key/value head (1: MHA)
        for name in ("W_K", "W_V", "b_K", "b_V"):
            if name in a:
                a[name] = np.repeat(a[name], group, axis=0)
        return HeadWeights(
            W_Q=a["W_Q"][None], W_K=a["W_K"][None], W_V=a["W_V"][None],
            W_O=per_head_out(a["W_O"], self.num_heads)[None],
            **{b: a[b][None] for b in ("b_Q", "b_K", "b_V", "b_O") if b in a},  # one layer: [1, ...]
            W_E=a["tok_emb.weight"], W_pos=a["pos_emb.weight"], vocab=tuple(spec.vocab),
            name=f"trained on {self.task}, h={self.num_heads}"
            + ("" if self.variant.kind == "mha" else f", {VARIANT_NAMES[self.variant.kind]} {self.variant.params()}"),
        )

    def parse(self, sequence: str | Sequence[str]) -> tuple[str, ...]:
        """The task's tokens of a sequence ("a b c" or ["a", "b", "c"]); ValueError saying what is wrong."""
        spec = get_task(self.task)
        tokens = tuple(sequence.split() if isinstance(sequence, str) else sequence)
        if not 2 <= len(tokens) <= spec.seq_len:
            raise ValueError(f"the sequence needs 2 to {spec.seq_len} tokens of the task, got {len(tokens)}")
        unknown = [t for t in tokens if t not in spec.vocab]
        if unknown:
            shown = ", ".join(repr(t[:12]) for t in unknown[:3])
            raise ValueError(f"{shown} {'is' if len(unknown) == 1 else 'are'} not a token of this task; its tokens are "
                             f"{spec.vocab[0]} … {spec.vocab[-1]} ({len(spec.vocab)} of them), separated by spaces")
        return tokens

    def probe(self) -> tuple[str, ...]:
        """The task's fixed probe sequence (the one Train mode's heatmaps show)."""
        spec = get_task(self.task)
        return spec.token_names(spec.probe())

    def trace(self, sequence: str | Sequence[str] | None = None) -> AttentionTrace:
        """The trained attention layer's AttentionTrace on a sequence of the task's tokens (default: the probe)."""
        tokens = self.probe() if sequence is None else self.parse(sequence)
        spec = get_task(self.task)
        ids = torch.tensor([spec.vocab.index(t) for t in tokens])  # (T,)
        meta = {"task": self.task, "step": self.steps, "seed": self.seed, "accuracy": self.mean_accuracy}
        if self.variant.kind != "mha" or self.diversity:
            meta |= {"variant": self.variant.kind, **self.variant.params(), "diversity": self.diversity,
                     "diversity_kind": self.diversity_kind}
        return self.model().trace(ids, tokens, meta)

"""What W_O does to the concatenation: each head's block of W_O followed to the logits that read it.

A head writes z_h W_O[h] into the layer's output (mha_viz.weights layout: z_h [d_v], W_O[h] [d_v, d_model]). Whatever
reads that output only sees it through its own weights, so a head's block of W_O is best judged by where the reader
takes it. Two readers are known exactly:

Trained layers (mha_viz.training). No residual, no MLP: relation r's logits are a W_r^T + b_r with a the layer's
output (TinyAttentionModel), so at query t, with y_r(t) the right answer,
    logits_r(t) = sum_h (z_h(t) W_O[h]) W_r^T  +  (b_O W_r^T + b_r)          exactly: one term per head plus biases
    direct contribution c[h, r] = mean over queries of  l_hr(t)[y_r(t)] - mean_v l_hr(t)[v],  l_hr = z_h W_O[h] W_r^T
The mean over the vocabulary is removed so that a shift every answer gets alike (which softmax ignores) does not
count. The queries are those where relation r is defined and its key differs from every other relation's key (as
relation_scores counts them), on the trainer's evaluation sequences.
Token map of head h for relation r: W_E W_V[h] W_O[h] W_r^T [V source tokens, V answer tokens], each row centred
the same way: what a key token raises in r's readout when the head attends to it with weight 1 (its position's
embedding and the biases add the same shift to every source token, so they are left out).

Language models (the bundled induction model). Each head's direct contribution to the right next token's logit on
repeated random tokens [start] + A + A (head_detectors.repeated_tokens), from PretrainedModel.logit_attribution (final
norm frozen at its measured scale; the raw logit: not centred), averaged over the queries of the second A whose next
token is known. Token map: W_E W_V W_O W_U per head with the norms folded (HeadWeights), rows centred; each row is up to
the positive 1/s of the norms the weights cannot hold, so its ranking is the model's. The map reads the source token's
embedding alone: what a later head reads at a position also holds earlier heads' outputs.
Copying share: the share of source tokens whose row's top answer is the token itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..token_labels import vocab_labels
from .head_detectors import repeated_tokens

if TYPE_CHECKING:
    from ..pretrained import PretrainedModel
    from ..training import TrainedLayer

MAX_VOCAB = 512  # the largest vocabulary whose whole V x V token maps are computed (8 heads: 8 MB)
SERVES = 0.5  # a head serves an answer when its contribution is at least this share of the largest head's
NEXT_TOKEN = "next token"
PHRASES = {"previous": "the previous token", "first": "the first token", "two back": "the token two back",
           "same letter": "the latest token with the same letter", NEXT_TOKEN: "the attended token"}


@dataclass(frozen=True, eq=False)
class DirectLogits:
    """A trained layer's logits on token sequences, split exactly into one term per head and the biases."""

    heads: np.ndarray  # (B, T, H, R, V) float64: (z_h W_O[h]) W_r^T
    bias: np.ndarray  # (R, V) float64: b_O W_r^T + b_r, the same at every query
    logits: np.ndarray  # (B, T, R, V) float32: the model's own logits

    @property
    def total(self) -> np.ndarray:
        """(B, T, R, V): the sum of the heads' terms and the biases, the model's logits again."""
        return self.heads.sum(2) + self.bias


@dataclass(frozen=True, eq=False)
class Readout:
    """Each head's block of W_O as the readout sees it: its direct contribution to the right answer and its token map.

    heads label the rows (head h of a one-layer model, "L1 H3" of a stack), answers the columns (a trained task's
    relations, or "next token").
    """

    name: str
    heads: tuple[str, ...]
    answers: tuple[str, ...]
    contributions: np.ndarray  # (heads, answers) float64: mean direct contribution to the right answer's logit
    rest: np.ndarray  # (answers,) float64: the mean of everything else that adds up to the logit (rest_label)
    logit: np.ndarray  # (answers,) float64: the model's own mean logit of the right answer (~ contributions.sum(0) + rest)
    queries: np.ndarray  # (answers,) int: how many queries were averaged
    vocab: tuple[str, ...]
    token_maps: np.ndarray  # (heads, answers, V, V) float32, rows centred: source token -> what it raises
    centred: bool  # the contributions had the mean over the vocabulary removed
    rest_label: str
    method: str  # how it was computed, in a sentence for the page

    @property
    def copying(self) -> np.ndarray:
        """(heads, answers): the share of source tokens whose token map row's top answer is the token itself."""
        V = len(self.vocab)
        return (self.token_maps.argmax(-1) == np.arange(V)).mean(-1)

    @property
    def diagonal(self) -> np.ndarray:
        """(heads, answers): the mean of each token map's diagonal minus the mean of its other entries."""
        maps = self.token_maps.astype(np.float64)
        V = maps.shape[-1]
        diag = np.diagonal(maps, axis1=-2, axis2=-1).mean(-1)  # (heads, answers)
        return diag - (maps.sum((-2, -1)) - diag * V) / (V * (V - 1))

    def strongest(self) -> tuple[int, int]:
        """(row, answer): the head whose direct contribution to a right answer's logit is the largest, and that
        answer (the first on a tie)."""
        row, answer = np.unravel_index(int(np.argmax(self.contributions)), self.contributions.shape)
        return int(row), int(answer)

    def serving(self, share: float = SERVES) -> tuple[tuple[int, ...], ...]:
        """For each answer, the heads whose contribution is positive and at least share x the largest one's."""
        out = []
        for c in self.contributions.T:  # (heads,)
            top = c.max()
            out.append(tuple(int(h) for h in np.flatnonzero((c > 0) & (c >= share * top))) if top > 0 else ())
        return tuple(out)

    def sentences(self) -> tuple[str, ...]:
        """What the numbers say, in words: which heads write which answer's identity where its readout looks."""
        serving = self.serving()
        V = len(self.vocab)
        said = []
        if len(self.answers) > 1 and len(set(serving)) == 1 and serving[0]:
            heads = serving[0]
            parts = ", ".join(f"+{self.contributions[heads, r].sum():.1f} for {a!r}" for r, a in enumerate(self.answers))
            copies = ", ".join(f"{_count(self.copying[heads[0], r], V)} in {a!r}" for r, a in enumerate(self.answers))
            one = len(heads) == 1
            said.append(f"{_upper(_heads(self, heads))} {'serves' if one else 'serve'} every relation at once: "
                        f"{'its' if one else 'their'} output is read by {len(self.answers)} readouts ({parts} on the "
                        f"right answer's logit on average), and {_heads(self, heads[:1])}'s token map sends source "
                        f"tokens to themselves in each ({copies}).")
            return tuple(said)
        for r, (answer, heads) in enumerate(zip(self.answers, serving, strict=True)):
            if not heads:
                said.append(f"No head raises the right answer for {answer!r}.")
                continue
            one = len(heads) == 1
            copies = ", ".join(_count(self.copying[h, r], V) for h in heads)
            where = "into the unembedding" if answer == NEXT_TOKEN else f"where the {answer!r} readout looks for it"
            said.append(f"{_upper(_heads(self, heads))} {'writes' if one else 'write'} "
                        f"{PHRASES.get(answer, f'the {answer} token')}'s identity {where}: "
                        f"+{self.contributions[heads, r].sum():.1f} on the right answer's logit on average; "
                        f"{'its token map sends' if one else 'their token maps send'} {copies} source tokens to "
                        "themselves (top answer).")
        return tuple(said)


def _heads(readout: Readout, heads: Sequence[int]) -> str:
    names = [readout.heads[h] for h in heads]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _upper(text: str) -> str:
    return text[:1].upper() + text[1:]


def _count(share: float, V: int) -> str:
    return f"{round(share * V)} of {V}"


def _span(counts: np.ndarray) -> str:
    lo, hi = int(counts.min()), int(counts.max())
    return str(lo) if lo == hi else f"{lo} to {hi}"


def _centre(a: np.ndarray) -> np.ndarray:
    return a - a.mean(-1, keepdims=True)


def direct_logits(layer: TrainedLayer, tokens: np.ndarray) -> DirectLogits:
    """The layer's logits on token ids (B, T) split into each head's term and the biases (module docstring)."""
    import torch

    model = layer.model()
    with torch.no_grad():
        logits, att = model(torch.as_tensor(np.asarray(tokens), dtype=torch.long))  # (B, T, R, V)
    R, V, H = model.num_outputs, model.vocab_size, layer.num_heads
    z = att.head_outputs.double().numpy()  # (B, H, T, d_v)
    W_O = model.attention.W_O.detach().double().numpy()  # (d_model, H*d_v)
    blocks = W_O.T.reshape(H, -1, W_O.shape[0])  # (H, d_v, d_model): head h's block, transposed
    W_r = model.readout.weight.detach().double().numpy().reshape(R, V, -1)  # (R, V, d_model)
    b_r = model.readout.bias.detach().double().numpy().reshape(R, V)
    b_O = model.attention.b_O
    b_O = np.zeros(W_O.shape[0]) if b_O is None else b_O.detach().double().numpy()  # (d_model,)
    written = np.einsum("bhtv,hvd->bthd", z, blocks)  # (B, T, H, d_model): z_h W_O[h]
    heads = np.einsum("bthd,rnd->bthrn", written, W_r)  # (B, T, H, R, V)
    return DirectLogits(heads=heads, bias=np.einsum("d,rnd->rn", b_O, W_r) + b_r, logits=logits.numpy())


def trained_readout(layer: TrainedLayer, tokens: np.ndarray | None = None) -> Readout:
    """Each head's direct contribution to every relation's right answer and its token maps (module docstring).
    tokens: sequences (B, T) of task token ids (default: the trainer's fixed evaluation batch)."""
    import torch

    from ..training.scores import relation_masks
    from ..training.tasks import IGNORE, get_task
    from ..training.trainer import EVAL_BATCH, EVAL_SEED

    spec = get_task(layer.task)
    if tokens is None:
        tokens = spec.sample(EVAL_BATCH, torch.Generator().manual_seed(EVAL_SEED)).numpy()  # (B, T)
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or not 2 <= tokens.shape[1] <= spec.seq_len or tokens.min() < 0 or tokens.max() >= len(spec.vocab):
        raise ValueError(f"tokens must be (sequences, 2 to {spec.seq_len}) ids of the task's {len(spec.vocab)} tokens, "
                         f"got shape {tokens.shape}")
    split = direct_logits(layer, tokens)
    t = torch.as_tensor(tokens)
    targets = spec.targets(t).numpy()  # (B, T, R)
    counted = relation_masks(spec.positions(t).numpy(), tokens.shape[1]).any(-1).transpose(0, 2, 1)  # (B, T, R)
    counted &= targets != IGNORE
    y = np.where(counted, targets, 0)  # (B, T, R)
    heads = np.take_along_axis(_centre(split.heads), y[:, :, None, :, None], -1)[..., 0]  # (B, T, H, R)
    bias = np.take_along_axis(np.broadcast_to(_centre(split.bias), y.shape + (split.bias.shape[-1],)),
                              y[..., None], -1)[..., 0]  # (B, T, R)
    n = counted.sum((0, 1))  # (R,)
    if not n.all():
        raise ValueError("some relation has no counted query in these sequences; give longer or more sequences")
    contributions = (heads * counted[:, :, None]).sum((0, 1)) / n  # (H, R)
    rest = (bias * counted).sum((0, 1)) / n  # (R,)
    own = np.take_along_axis(_centre(split.logits.astype(np.float64)), y[..., None], -1)[..., 0]  # (B, T, R)

    w = layer.head_weights()
    R, V = len(spec.relations), len(spec.vocab)
    W_r = layer.state["readout.weight"].astype(np.float64).reshape(R, V, -1)  # (R, V, d_model)
    written = np.stack([w.W_E.astype(np.float64) @ w.W_OV(0, h) for h in range(layer.num_heads)])  # (H, V, d_model)
    maps = _centre(np.einsum("hsd,rvd->hrsv", written, W_r)).astype(np.float32)  # (H, R, V, V)
    return Readout(
        name=f"trained on {layer.task}, h={layer.num_heads}", heads=tuple(f"head {h}" for h in range(layer.num_heads)),
        answers=spec.relation_names, contributions=contributions, rest=rest, logit=(own * counted).sum((0, 1)) / n,
        queries=n, vocab=tuple(spec.vocab), token_maps=maps, centred=True, rest_label="b_O and the readout's bias",
        method=f"averaged over {_span(n)} queries of {len(tokens)} sequences where each relation is "
               "defined and its key differs from the other relations'; logits centred over the vocabulary",
    )


def model_readout(model: PretrainedModel, *, seed: int = 0, length: int = 16, batch: int = 2) -> Readout:
    """Each head's direct contribution to the right next token on repeated random tokens and its full OV circuit
    W_E W_V W_O W_U (module docstring). ValueError for a model without logit attribution, or a vocabulary of more
    than MAX_VOCAB tokens."""
    w = model.head_weights()
    if w.W_E is None or w.W_U is None:
        raise ValueError(f"{model.name} has no token embedding and unembedding to follow W_O to")
    V = w.W_E.shape[0]
    if V > MAX_VOCAB:
        raise ValueError(f"{model.name} has {V} tokens: whole token maps are drawn for at most {MAX_VOCAB}")
    ids, start, n = repeated_tokens(model, seed=seed, length=length, batch=batch)  # (B, start + 2n)
    L, H = w.num_layers, w.num_heads
    heads, rest, logit = [], [], []
    for row in ids:
        for i in range(start + n, start + 2 * n - 1):  # the second A: the next token repeats the first A
            a = model.logit_attribution(ids=row[: i + 1].tolist(), position=i, token=int(row[i + 1]))
            heads.append(a.heads.reshape(-1))  # (L*H,)
            rest.append(sum(a.terms.values()))
            logit.append(a.logit)
    contributions = np.mean(heads, axis=0)[:, None]  # (L*H, 1)
    written = np.stack([w.W_E.astype(np.float64) @ w.W_OV(l, h) for l in range(L) for h in range(H)])  # (L*H, V, d)
    maps = _centre(written @ w.W_U.astype(np.float64))[:, None].astype(np.float32)  # (L*H, 1, V, V)
    vocab = w.vocab if w.vocab is not None else vocab_labels(model.tokenizer, range(V))
    return Readout(
        name=model.name, heads=tuple(f"L{l} H{h}" for l in range(L) for h in range(H)), answers=(NEXT_TOKEN,),
        contributions=contributions, rest=np.array([np.mean(rest)]), logit=np.array([np.mean(logit)]),
        queries=np.array([len(logit)]), vocab=vocab, token_maps=maps, centred=False,
        rest_label="embeddings, MLPs and biases",
        method=f"averaged over {len(logit)} queries of {batch} sequences [start] + A + A (A: {n} random tokens, seed "
               f"{seed}), the final norm frozen at its measured scale (PretrainedModel.logit_attribution)",
    )

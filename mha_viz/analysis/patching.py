"""Causal patching: which activations of a causal language model carry a behaviour (Meng et al. 2022, Wang et al. 2022).

Two prompts of the same token length: `clean`, where the model shows the behaviour (says `answer`), and
`corrupted`, where it does not. A metric reads the LM head after the last token:
    logit_diff   logit(answer) - logit(wrong)        (when wrong is given; the default then)
    logprob      log softmax(logits)[answer]         (the default without wrong)
    prob         softmax(logits)[answer]
Activation patching runs one prompt with one activation taken from the other run:
    denoise   the corrupted run, one activation from the clean run    (is it enough to restore the behaviour?)
    noise     the clean run, one activation from the corrupted run    (is it needed for the behaviour?)
and scores every unit as (metric(patched) - metric(corrupted)) / (metric(clean) - metric(corrupted)):
0 is the corrupted run, 1 the clean run, in both directions. Sites:
    head           head h's output: its block of the concat before W_O, all positions     scores [layers, heads]
    head_position  the same at one position                                   scores [layers, heads, positions]
    residual       the residual stream at a block's input (before its norm and attention), one position
                   (TransformerLens's resid_pre)                                       scores [layers, positions]
    pattern        head h's attention weights, all queries: its block becomes pattern @ V of the running
                   prompt (V read on the projection in the same pass)                  scores [layers, heads]
Path patching (path_patching) follows Wang et al. 2022; see its docstring.

Every patched unit is one sequence through the model, run in batches; the number is capped (max_passes).
Prompts longer than the model reads (its positions, or max_tokens) are cut to their first tokens, so the metric reads
the prediction after the last token kept: a result says so (`truncated`, `notice`); patch_heads, which returns a bare
number, refuses such prompts instead.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

from ..limits import MAX_PATCH_PASSES
from ..names import PATCH_DIRECTIONS, PATCH_METRICS, PATCH_SITES, PATCH_THROUGH
from ..token_labels import id_label

if TYPE_CHECKING:
    from ..pretrained import PretrainedModel
    from ..pretrained.adapter import Site

SITES, DIRECTIONS, METRICS = PATCH_SITES, PATCH_DIRECTIONS, PATCH_METRICS
THROUGH = PATCH_THROUGH
BATCH = 16  # patched sequences per forward pass

Unit = tuple[int, ...]  # (layer, head), (layer, head, position) or (layer, position)


@dataclass(frozen=True)
class PatchingResult:
    """Normalised patching scores: 0 = the corrupted run's metric, 1 = the clean run's.

    scores: [layers, heads] (head, pattern, path_*), [layers, heads, positions] (head_position) or
    [layers, positions] (residual); NaN where a unit cannot matter (path patching: no receiver after the sender).
    """

    scores: np.ndarray
    clean: float  # the metric on the clean prompt
    corrupted: float  # the metric on the corrupted prompt
    metric: str  # logit_diff, logprob or prob
    site: str  # head, head_position, residual, pattern, or path_q / path_k / path_v
    direction: str  # denoise or noise
    tokens: tuple[str, ...]  # the clean prompt's tokens
    corrupted_tokens: tuple[str, ...]
    answer: str
    wrong: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)  # path patching: receivers
    truncated: tuple[int, int] | None = None  # (tokens kept, tokens each prompt has) when the prompts were cut

    @property
    def notice(self) -> str | None:
        """What was cut, in words, or None when the prompts were read whole."""
        return cut_notice(self.truncated)

    def raw(self) -> np.ndarray:
        """The metric of every patched run (the scores before normalisation)."""
        return self.corrupted + self.scores * (self.clean - self.corrupted)


@dataclass(frozen=True)
class PathPatching:
    """One path from a sender head to receiver heads: score normalised as in PatchingResult, value the metric."""

    score: float
    value: float
    clean: float
    corrupted: float
    metric: str
    direction: str
    sender: tuple[int, int]
    receivers: tuple[tuple[int, int], ...]
    through: str
    truncated: tuple[int, int] | None = None  # (tokens kept, tokens each prompt has) when the prompts were cut

    @property
    def notice(self) -> str | None:
        """What was cut, in words, or None when the prompts were read whole."""
        return cut_notice(self.truncated)


def cut_notice(truncated: tuple[int, int] | None) -> str | None:
    """The notice for prompts cut to fit the model: (tokens kept, tokens each prompt has) in words."""
    if truncated is None:
        return None
    kept, total = truncated
    return (f"The prompts are longer than the model reads: only their first {kept} of {total} tokens were patched, "
            f"so the metric reads the prediction after token {kept}, not after the end of the prompts.")


@dataclass(frozen=True)
class PatchingPair:
    """A ready-made clean/corrupted pair for a bundled model."""

    name: str
    model: str
    clean: str
    corrupted: str
    answer: str
    wrong: str | None
    about: str


PAIRS: dict[str, PatchingPair] = {
    p.name: p
    for p in (
        PatchingPair(
            "induction: first follower changes", "mha-viz/induction-2l",
            "red fox blue sky green tree red", "red cat blue sky green tree red", "fox", "cat",
            "The word after the first 'red' is 'fox' in the clean prompt and 'cat' in the corrupted one; the "
            "induction heads of layer 1 copy whichever followed 'red', so the logit difference fox - cat flips.",
        ),
        PatchingPair(
            "induction: repeated word changes", "mha-viz/induction-2l",
            "red fox blue sky green tree red", "red fox blue sky green tree blue", "fox", "sky",
            "The last word repeats 'red' (followed by 'fox') in the clean prompt and 'blue' (followed by 'sky') in "
            "the corrupted one: the model continues each repeat.",
        ),
        PatchingPair(
            "induction: longer repeat", "mha-viz/induction-2l",
            "cat sun moon dog fish rain snow cat sun moon dog", "cat sun moon owl fish rain snow cat sun moon dog",
            "fish", "owl",
            "The repeat 'cat sun moon dog' was followed by 'fish'; in the corrupted prompt the first 'dog' is 'owl', "
            "so the model's evidence for 'fish' after the second 'dog' is gone.",
        ),
    )
}  # fmt: skip


def pairs_for(model_name: str) -> dict[str, PatchingPair]:
    """The ready-made pairs of one model, by name."""
    return {name: p for name, p in PAIRS.items() if p.model == model_name}


def patching_unavailable(model: PretrainedModel) -> str | None:
    """Why activation patching cannot run on model, or None when it can."""
    reason = model.next_token_unavailable
    adapter = getattr(model, "adapter", None)
    if reason is None and adapter is None:
        reason = (f"{model.name} is not a Hugging Face model: patching hooks its modules (for a TransformerLens "
                  "model, transformer_lens.patching patches it through its own hook points)")
    elif reason is None and not adapter.knockout:
        reason = f"its attention layers are not opened up: {model.unavailable}"
    elif reason is None and len(set(getattr(model, "layer_heads", {}).get("decoder", ()))) > 1:
        reason = ("its layers differ in heads (a hybrid's mixer and attention layers): patching's tables are layers x "
                  "heads, one head count for every layer")
    elif reason is None and adapter.site("decoder", 0).num_heads != model.num_heads["decoder"]:
        reason = ("its heads are differential (two softmax maps and a norm per head): patching sets one query head's "
                  "block of the concat at a time, which is not one of its heads")
    return reason


def activation_patching(
    model: PretrainedModel,
    clean: str,
    corrupted: str,
    *,
    answer: int | str,
    wrong: int | str | None = None,
    site: str = "head",
    direction: str = "denoise",
    metric: str | None = None,
    max_passes: int = MAX_PATCH_PASSES,
    on_pass: Callable[[int, int], None] | None = None,
) -> PatchingResult:
    """Patch every unit of site between the clean and the corrupted prompt; see the module docstring.

    answer, wrong: a token string of the model's vocabulary or an id. ValueError for prompts of different token
    lengths, an unknown token, a metric that does not tell the prompts apart, or more than max_passes patched
    sequences; on_pass(done, total) after each batch.
    """
    run = _Runs(model, clean, corrupted, answer, wrong, metric, direction)
    if site not in SITES:
        raise ValueError(f"site must be one of {SITES}, got {site!r}")
    L, H, T = run.L, run.H, run.T
    if site == "residual" and run.blocks is None:
        raise ValueError(f"residual patching needs the residual stream, which mha-viz does not know for {model.name}")
    if site == "pattern" and any(s.v is None for s in run.sites):
        raise ValueError(f"pattern patching needs the value projections, which mha-viz does not know for {model.name}")
    shape = {"head": (L, H), "pattern": (L, H), "head_position": (L, H, T), "residual": (L, T)}[site]
    units = [tuple(int(i) for i in u) for u in np.ndindex(*shape)]
    _check_passes(len(units), max_passes, site)
    source, target = (run.clean, run.corrupted) if direction == "denoise" else (run.corrupted, run.clean)
    values = np.empty(len(units))
    for start in range(0, len(units), BATCH):
        batch = units[start : start + BATCH]
        with contextlib.ExitStack() as hooks:
            for layer in range(L):
                here = [(b, u) for b, u in enumerate(batch) if u[0] == layer]
                if here:
                    hooks.enter_context(_patch_hooks(run, site, layer, here, source))
            values[start : start + len(batch)] = run.metric_of(target.ids, len(batch))
        if on_pass is not None:
            on_pass(start + len(batch), len(units))
    return run.result(values.reshape(shape), site)


def patch_heads(
    model: PretrainedModel,
    clean: str,
    corrupted: str,
    heads: Sequence[tuple[int, int]],
    *,
    answer: int | str,
    wrong: int | str | None = None,
    direction: str = "denoise",
    metric: str | None = None,
) -> float:
    """The normalised score (0 = corrupted, 1 = clean) of patching the outputs of all these (layer, head) at once, all
    positions: e.g. every induction head together. ValueError for prompts longer than the model reads (a bare
    number cannot say they were cut)."""
    run = _Runs(model, clean, corrupted, answer, wrong, metric, direction)
    if run.truncated is not None:
        raise ValueError(cut_notice(run.truncated).replace("were patched, so", "would be patched, and"))
    units = [run.head(u, "head") for u in heads]
    source, target = (run.clean, run.corrupted) if direction == "denoise" else (run.corrupted, run.clean)
    with contextlib.ExitStack() as hooks:
        for layer in sorted({layer for layer, _ in units}):
            hooks.enter_context(_patch_hooks(run, "head", layer, [(0, u) for u in units if u[0] == layer], source))
        return run.normalise(float(run.metric_of(target.ids, 1)[0]))


def path_patching(
    model: PretrainedModel,
    clean: str,
    corrupted: str,
    *,
    sender: tuple[int, int],
    receivers: Sequence[tuple[int, int]],
    through: str = "q",
    answer: int | str,
    wrong: int | str | None = None,
    direction: str = "noise",
    metric: str | None = None,
) -> PathPatching:
    """Path patching from sender (layer, head) to receivers through their queries, keys or values (Wang et al. 2022).

    direction "noise" (as in the paper): base = clean prompt, source = corrupted; "denoise" swaps them.
      1. the base run and the source run, every head's output (its concat block before W_O) kept;
      2. the base prompt again with the sender's output set to the source run's and every other head's output, in
         every layer, frozen at its base-run value; MLPs, norms and the embeddings are recomputed, so the sender's
         change reaches the receivers by the residual stream directly and through MLPs, never through another head.
         The receivers' q, k or v (the projection's output for their head, before any rotary) are recorded;
      3. the base prompt once more with only the receivers' q, k or v set to what step 2 recorded.
    The metric of run 3 is normalised like activation patching (0 = corrupted, 1 = clean). With grouped-query
    attention a key or value head is shared: patching it through "k" or "v" patches it for its whole group.
    """
    run = _Runs(model, clean, corrupted, answer, wrong, metric, direction)
    senders = [run.head(sender, "sender")]
    receivers = _receivers(run, receivers, through)
    value = float(_path_values(run, senders, receivers, through)[0])
    return PathPatching(run.normalise(value), value, run.clean.metric, run.corrupted.metric, run.metric, direction,
                        senders[0], receivers, through, run.truncated)


def path_patching_scan(
    model: PretrainedModel,
    clean: str,
    corrupted: str,
    *,
    receivers: Sequence[tuple[int, int]],
    through: str = "q",
    answer: int | str,
    wrong: int | str | None = None,
    direction: str = "noise",
    metric: str | None = None,
    max_passes: int = MAX_PATCH_PASSES,
    on_pass: Callable[[int, int], None] | None = None,
) -> PatchingResult:
    """path_patching from every sender head before the last receiver's layer to receivers: scores [layers, heads],
    NaN for senders in or after that layer (no path). Two patched sequences per sender."""
    run = _Runs(model, clean, corrupted, answer, wrong, metric, direction)
    receivers = _receivers(run, receivers, through)
    last = max(layer for layer, _ in receivers)
    senders = [(layer, h) for layer in range(last) for h in range(run.H)]
    _check_passes(2 * len(senders), max_passes, f"path patching through {through}",
                  "pick receivers in an earlier layer (fewer heads before them send)")
    scores = np.full((run.L, run.H), np.nan)
    for start in range(0, len(senders), BATCH):
        batch = senders[start : start + BATCH]
        for (layer, h), value in zip(batch, _path_values(run, batch, receivers, through), strict=True):
            scores[layer, h] = run.normalise(float(value))
        if on_pass is not None:
            on_pass(start + len(batch), len(senders))
    return run.result(scores, f"path_{through}", raw=False, detail={"receivers": receivers})


def _check_passes(n: int, max_passes: int, what: str,
                  hint: str = "patch heads over all positions, or use shorter prompts") -> None:
    if n > max_passes:
        raise ValueError(f"{what} needs {n} patched passes through the model, more than the limit of {max_passes}; {hint}")


def _receivers(run: _Runs, receivers: Sequence[tuple[int, int]], through: str) -> tuple[tuple[int, int], ...]:
    if through not in THROUGH:
        raise ValueError(f"through must be one of {THROUGH}, got {through!r}")
    out = tuple(dict.fromkeys(run.head(r, "receiver") for r in receivers))
    if not out:
        raise ValueError("give at least one receiver head (layer, head)")
    return out


@dataclass
class _Run:
    """One prompt's run without patching: ids, tokens, metric, and per layer the concat before W_O (T, H*d_v),
    the residual stream at the block's input (T, d) and the attention weights (H, T, T)."""

    ids: Tensor
    tokens: tuple[str, ...]
    metric: float = math.nan
    concat: list[Tensor] = field(default_factory=list)
    resid: list[Tensor] = field(default_factory=list)
    pattern: list[Tensor] = field(default_factory=list)


class _Runs:
    """The clean and the corrupted run of one patching question, checked, and the model's layout."""

    def __init__(self, model: PretrainedModel, clean: str, corrupted: str, answer: int | str, wrong: int | str | None,
                 metric: str | None, direction: str) -> None:
        reason = patching_unavailable(model)
        if reason is not None:
            raise ValueError(f"patching is unavailable: {reason}")
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        metric = metric or ("logit_diff" if wrong is not None else "logprob")
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
        if (metric == "logit_diff") != (wrong is not None):
            raise ValueError("the logit difference needs a wrong token, and only it uses one")
        from ..pretrained.attribution import vocab_id

        self.model, self.metric, self.direction = model, metric, direction
        vocab = model.model.get_output_embeddings().weight.shape[0]
        self.answer, self.wrong = vocab_id(model, answer, vocab), None if wrong is None else vocab_id(model, wrong, vocab)
        encoded = [model.encode(text) for text in (clean, corrupted)]
        total = [len(e.ids) + e.dropped for e in encoded]  # before any cut: two long prompts are cut alike
        if total[0] != total[1]:
            raise ValueError(f"the clean and the corrupted prompt must have the same number of tokens: "
                             f"{total[0]} and {total[1]}")
        self.T = len(encoded[0].ids)
        self.truncated = (self.T, total[0]) if total[0] > self.T else None  # (kept, of how many)
        self.L = model.num_layers["decoder"]
        self.sites = [model.adapter.site("decoder", layer) for layer in range(self.L)]
        self.H = self.sites[0].num_heads
        layout = model.adapter.residual_stream()
        self.blocks = None if layout is None else list(layout[0])
        device = model.adapter.device()
        self.clean, self.corrupted = (
            self._capture(_Run(torch.tensor([list(e.ids)], device=device), e.tokens)) for e in encoded
        )
        if not abs(self.clean.metric - self.corrupted.metric) > 1e-6 * max(1.0, abs(self.clean.metric)):
            raise ValueError(f"the clean and the corrupted prompt give the same {metric} "
                             f"({self.clean.metric:.4g}): nothing to restore")

    def head(self, unit: tuple[int, int], what: str) -> tuple[int, int]:
        layer, h = (int(i) for i in unit)
        if not (0 <= layer < self.L and 0 <= h < self.H):
            raise ValueError(f"{what} {unit!r} is not a head: layers 0 ... {self.L - 1}, heads 0 ... {self.H - 1}")
        return layer, h

    def normalise(self, value: float) -> float:
        return (value - self.corrupted.metric) / (self.clean.metric - self.corrupted.metric)

    def result(self, values: np.ndarray, site: str, *, raw: bool = True, detail: dict | None = None) -> PatchingResult:
        scores = (values - self.corrupted.metric) / (self.clean.metric - self.corrupted.metric) if raw else values
        tok = functools.partial(id_label, self.model.tokenizer)
        return PatchingResult(
            scores=scores.astype(np.float32), clean=self.clean.metric, corrupted=self.corrupted.metric,
            metric=self.metric, site=site, direction=self.direction, tokens=self.clean.tokens,
            corrupted_tokens=self.corrupted.tokens, answer=tok(self.answer),
            wrong=None if self.wrong is None else tok(self.wrong), detail=detail or {}, truncated=self.truncated,
        )  # fmt: skip

    @torch.no_grad()
    def metric_of(self, ids: Tensor, batch: int) -> np.ndarray:
        """The metric of `batch` copies of ids (1, T) through the model with whatever hooks are on: (batch,)."""
        with self.model.lock:
            logits = self.model.model(input_ids=ids.expand(batch, -1), use_cache=False).logits[:, -1]  # (B, V)
        logits = logits.double()
        if self.metric == "logit_diff":
            return (logits[:, self.answer] - logits[:, self.wrong]).cpu().numpy()
        logp = logits.log_softmax(-1)[:, self.answer]
        return (logp if self.metric == "logprob" else logp.exp()).cpu().numpy()

    @torch.no_grad()
    def _capture(self, run: _Run) -> _Run:
        """Run once, keeping every layer's concat, residual input and attention weights, and the metric."""
        concat: dict[int, Tensor] = {}
        resid: dict[int, Tensor] = {}

        def keep_concat(layer: int) -> Callable[..., None]:
            return lambda module, args: concat.__setitem__(layer, args[0][0].detach())

        def keep_resid(layer: int) -> Callable[..., None]:
            return lambda module, args, kwargs: resid.__setitem__(layer, _hidden(args, kwargs)[0].detach())

        handles = [s.out.register_forward_pre_hook(keep_concat(i)) for i, s in enumerate(self.sites)]
        handles += [b.register_forward_pre_hook(keep_resid(i), with_kwargs=True) for i, b in enumerate(self.blocks or [])]
        try:
            with self.model.lock:
                out = self.model.model(input_ids=run.ids, use_cache=False, output_attentions=True)
        finally:
            for handle in handles:
                handle.remove()
        logits = out.logits[:, -1].double()  # (1, V)
        if self.metric == "logit_diff":
            run.metric = float(logits[0, self.answer] - logits[0, self.wrong])
        else:
            logp = float(logits[0].log_softmax(-1)[self.answer])
            run.metric = logp if self.metric == "logprob" else math.exp(logp)
        run.concat = [concat[i] for i in range(self.L)]
        run.resid = [resid[i] for i in range(len(resid))]
        run.pattern = [a[0].detach() for a in self.model.adapter.model_attentions(out, "decoder")]
        return run


def _hidden(args: tuple, kwargs: dict) -> Tensor:
    return args[0] if args else kwargs["hidden_states"]


def _block(site: Site, h: int) -> slice:
    """Head h's columns in the concat before W_O (nn.Linear stores (d_out, H*d_v), GPT-2's Conv1D (H*d_v, d_out))."""
    d = (site.out.in_features if isinstance(site.out, nn.Linear) else site.out.weight.shape[0]) // site.num_heads
    return slice(h * d, (h + 1) * d)


@contextlib.contextmanager
def _hooked(*registrations: Callable[[], Any]) -> Iterator[None]:
    handles = [register() for register in registrations]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _patch_hooks(run: _Runs, site_name: str, layer: int, here: list[tuple[int, Unit]], source: _Run):
    """Hooks that patch the units of one layer into batch rows b, from source."""
    site = run.sites[layer]
    if site_name == "residual":
        block = run.blocks[layer]

        def resid(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            x = _hidden(args, kwargs).clone()  # (B, T, d)
            for b, (_, p) in here:
                x[b, p] = source.resid[layer][p]
            return ((x, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": x})

        return _hooked(lambda: block.register_forward_pre_hook(resid, with_kwargs=True))
    if site_name in ("head", "head_position"):

        def concat(module: nn.Module, args: tuple) -> tuple:
            x = args[0].clone()  # (B, T, H*d_v)
            for b, unit in here:
                cols = _block(site, unit[1])
                if site_name == "head":
                    x[b, :, cols] = source.concat[layer][:, cols]
                else:
                    x[b, unit[2], cols] = source.concat[layer][unit[2], cols]
            return (x, *args[1:])

        return _hooked(lambda: site.out.register_forward_pre_hook(concat))
    return _pattern_hooks(run, site, layer, [(b, unit[1], source.pattern[layer][unit[1]]) for b, unit in here])


def _pattern_hooks(run: _Runs, site: Site, layer: int, patches: list[tuple[int, int, Tensor]]):
    """Set head h's concat block in batch row b to pattern (T, T) @ V of this pass: (b, h, pattern) for each patch."""
    values: list[Tensor] = []
    projection = site.q if site.fused else site.v

    def keep_v(module: nn.Module, args: tuple, output: Tensor) -> None:
        values.append(run.model.adapter.qkv_columns(site, output)[2] if site.fused else output)  # (B, S, KV*d_v)

    def concat(module: nn.Module, args: tuple) -> tuple:
        x = args[0].clone()  # (B, T, H*d_v)
        v = values[-1].unflatten(-1, (site.num_kv_heads, -1))  # (B, S, KV, d_v)
        for b, h, pattern in patches:
            x[b, :, _block(site, h)] = (pattern.to(v.dtype) @ v[b, :, site.kv_heads[h]]).to(x.dtype)
        return (x, *args[1:])

    return _hooked(lambda: projection.register_forward_hook(keep_v), lambda: site.out.register_forward_pre_hook(concat))


def _columns(run: _Runs, site: Site, through: str, h: int) -> tuple[nn.Module, Tensor]:
    """The projection module carrying head h's q, k or v, and its output columns for that head."""
    n = site.num_heads if through == "q" else site.num_kv_heads
    head = h if through == "q" else site.kv_heads[h]
    if site.fused:
        n_out = site.q.out_features if isinstance(site.q, nn.Linear) else site.q.weight.shape[1]  # Conv1D: (d_in, n_out)
        cols = run.model.adapter.qkv_columns(site, torch.arange(n_out))["qkv".index(through)]  # where its columns are
        module = site.q
    else:
        module = {"q": site.q, "k": site.k, "v": site.v}[through]
        cols = torch.arange(module.weight.shape[0])  # nn.Linear: (n_out, d_in)
    return module, cols.unflatten(0, (n, -1))[head]


def _path_values(run: _Runs, senders: list[tuple[int, int]], receivers: tuple[tuple[int, int], ...],
                 through: str) -> np.ndarray:
    """Runs 2 and 3 of path patching, one batch row per sender: the metric of run 3 for each, (len(senders),)."""
    base, source = (run.clean, run.corrupted) if run.direction == "noise" else (run.corrupted, run.clean)
    B = len(senders)
    targets = {}  # (module, cols) per receiver
    for layer, h in receivers:
        targets[(layer, h)] = _columns(run, run.sites[layer], through, h)
    recorded: dict[tuple[int, int], Tensor] = {}

    def freeze(layer: int) -> Callable[..., tuple]:
        def hook(module: nn.Module, args: tuple) -> tuple:
            x = base.concat[layer].expand(B, -1, -1).clone()  # (B, T, H*d_v): every head at its base-run value
            for b, (sl, sh) in enumerate(senders):
                if sl == layer:
                    cols = _block(run.sites[layer], sh)
                    x[b, :, cols] = source.concat[layer][:, cols]
            return (x.to(args[0].dtype), *args[1:])

        return hook

    def record(key: tuple[int, int]) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple, output: Tensor) -> None:
            recorded[key] = output[..., targets[key][1]].detach().clone()  # (B, T, d)

        return hook

    def replace(key: tuple[int, int]) -> Callable[..., Tensor]:
        def hook(module: nn.Module, args: tuple, output: Tensor) -> Tensor:
            output = output.clone()
            output[..., targets[key][1]] = recorded[key]
            return output

        return hook

    frozen = [lambda s=s, i=i: s.out.register_forward_pre_hook(freeze(i)) for i, s in enumerate(run.sites)]
    records = [lambda k=k: targets[k][0].register_forward_hook(record(k)) for k in receivers]
    with _hooked(*frozen, *records):
        run.metric_of(base.ids, B)
    with _hooked(*(lambda k=k: targets[k][0].register_forward_hook(replace(k)) for k in receivers)):
        return run.metric_of(base.ids, B)

"""TransformerLens: a HookedTransformer opened up like a PretrainedModel (load_model(hooked) returns a HookedModel).

    >>> import mha_viz
    >>> from transformer_lens import HookedTransformer                          # doctest: +SKIP
    >>> model = mha_viz.load_model(HookedTransformer.from_pretrained("gpt2"))  # doctest: +SKIP
    >>> model.trace("The cat sat", layer=3).meta["check"]  # doctest: +SKIP
    {'weights vs hook_pattern': ..., 'head outputs vs hook_z': ..., 'concat @ W_O^T + b vs hook_attn_out': ...}

One traced forward pass (HookedTransformer.hooks) records, for each traced layer l, blocks.l.attn's
    hook_q [pos, head, d_head], hook_k, hook_v [pos, kv_head, d_head]   (kv_head < head: grouped-query attention)
    hook_rot_q, hook_rot_k (rotary models), hook_pattern [head, query, key], hook_z [pos, head, d_head]
and blocks.l.hook_attn_out [pos, d_model]. The trace's weights, scores and head outputs come from
mha_viz.attention.attend(q, k, v, Variations(...)) with the layer's own 1 / attn_scale, rotary cos/sin (TL's
buffers), soft-cap, causal mask and local window; they are checked against hook_pattern and hook_z, and
hook_z flattened (the concat, what W_O reads) times W_O against hook_attn_out (meta["check"]).
Head masks (knockout) scale hook_z's heads, so every later layer sees the change.

Tokens: the tokenizer given, else the model's own (HookedTransformer.tokenizer); a model without either is
refused (ModelLoadError: pass tokenizer=). prepend_bos follows TransformerLens's convention: by default
cfg.default_prepend_bos, so text is read as [BOS] + its tokens, as model.to_tokens(text) reads it (the
tokenizer's own special tokens are not added). transformer_lens is never imported here: a HookedTransformer
comes with it already imported.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..attention import Variations, attend
from ..checks import verify
from ..sampling import GREEDY, Sampling
from ..token_labels import id_label, token_labels
from ..trace import AttentionTrace
from ..weights import HeadWeights, centre_writer, fold_reader
from .adapter import max_abs_diff, to_numpy
from .attribution import LogitAttribution, checked_request, split_logit, vocab_id
from .encoded import Coverage, Encoded
from .errors import ModelLoadError
from .generation import Generation, GenerationStep, check_request, sampling_distribution, stop_asked
from .norms import NormAffine
from .weights import vocabulary

POSITIONS = ("standard", "rotary", "shortformer")  # positional_embedding_type values a trace reproduces
_POST_NORM = ("OlmoeForCausalLM", "Olmo2ForCausalLM", "Olmo3ForCausalLM")  # q/k norms over all heads, post-norms


def is_hooked_transformer(model: object) -> bool:
    """Whether model is a TransformerLens HookedTransformer (without importing transformer_lens: if it is one, the
    package is already imported)."""
    tl = sys.modules.get("transformer_lens")
    return tl is not None and isinstance(model, tl.HookedTransformer)


def unsupported(cfg: Any) -> str | None:
    """Why a HookedTransformerConfig's attention cannot be traced exactly by attend(), or None when it can."""
    if cfg.positional_embedding_type not in POSITIONS:
        return f"its positions are {cfg.positional_embedding_type!r}; mha-viz traces {', '.join(POSITIONS)}"
    flags = {
        "rotary_adjacent_pairs": "rotary on adjacent pairs (GPT-J style)",
        "use_logn_attn": "log-n query scaling",
        "use_dynamic_ntk_rope": "dynamic NTK rotary",
        "use_attention_sinks": "attention sinks",
        "use_normalization_before_and_after": "a norm after attention (its output is not concat W_O + b_O)",
        "load_in_4bit": "4-bit weights",
    }
    on = [what for flag, what in flags.items() if getattr(cfg, flag, False)]
    if getattr(cfg, "clip_qkv", None) is not None:
        on.append("clipped q/k/v")
    if cfg.original_architecture in _POST_NORM:
        on.append(f"{cfg.original_architecture}'s norms")
    if on:
        return f"its attention uses {', '.join(on)}, which mha-viz does not reproduce"
    return None


class HookedModel:
    """A TransformerLens HookedTransformer traced one attention layer at a time, with PretrainedModel's interface
    (trace, traces, attentions, encode, tokens, next_token_probs, final_hidden, head masks), so that
    mha_viz.sources.ModelSource and the app's views take it. The part is "decoder" (causal attention) or "encoder"
    (attention_dir "bidirectional"). See the module docstring for hooks, tokens and prepend_bos.

    The model is switched to eval mode in place. max_tokens: longer texts are cut; at most (and by default)
    cfg.n_ctx. ModelLoadError for a configuration whose attention mha-viz does not reproduce (unsupported()), or a
    model without a tokenizer.
    """

    architecture = "HookedTransformer"
    unavailable: str | None = None  # every intermediate is traced

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        name: str | None = None,
        max_tokens: int | None = None,
        prepend_bos: bool | None = None,
        strict: bool = False,
    ) -> None:
        self.strict = strict  # a failed self-check raises TraceCheckError (else a TraceCheckWarning): mha_viz.checks
        if not is_hooked_transformer(model):
            raise ModelLoadError(f"HookedModel needs a TransformerLens HookedTransformer, got {type(model).__name__}")
        cfg = model.cfg
        reason = unsupported(cfg)
        if reason is not None:
            raise ModelLoadError(f"Cannot open {cfg.model_name}: {reason}.")
        tokenizer = tokenizer if tokenizer is not None else model.tokenizer
        if tokenizer is None:
            raise ModelLoadError(f"{cfg.model_name} has no tokenizer (a model built from a config): pass one, "
                                 "load_model(model, tokenizer=AutoTokenizer.from_pretrained(...))")
        if len(tokenizer) > cfg.d_vocab:
            raise ModelLoadError(f"the tokenizer has {len(tokenizer)} tokens but {cfg.model_name} embeds "
                                 f"d_vocab = {cfg.d_vocab}")
        self.hooked = model.eval()
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.name: str = name or cfg.model_name
        self.prepend_bos: bool = cfg.default_prepend_bos if prepend_bos is None else bool(prepend_bos)
        if self.prepend_bos and tokenizer.bos_token_id is None:
            raise ModelLoadError(f"prepend_bos is on but the tokenizer of {self.name} has no BOS token: "
                                 "pass prepend_bos=False")
        self.kind: str = "decoder" if cfg.attention_dir == "causal" else "encoder"
        self.parts: tuple[str, ...] = (self.kind,)
        self.max_tokens: int = min(n for n in (max_tokens, cfg.n_ctx) if n)
        self.num_layers: dict[str, int] = {self.kind: cfg.n_layers}
        self.num_heads: dict[str, int] = {self.kind: cfg.n_heads}
        self.layer_heads: dict[str, tuple[int, ...]] = {self.kind: (cfg.n_heads,) * cfg.n_layers}
        self.vocab_size: int = cfg.d_vocab
        self._lock = threading.Lock()  # hooks live on the model: one traced forward pass at a time

    def __repr__(self) -> str:
        return f"HookedModel({self.name!r}, {self.kind}, layers={self.cfg.n_layers}, heads={self.cfg.n_heads})"

    # Tokens

    def layer_kinds(self, part: str | None = None) -> tuple[str, ...]:
        """Every layer of a HookedTransformer is softmax attention (PretrainedModel.layer_kinds)."""
        return ("softmax",) * self.num_layers[self.kind]

    def encode(self, text: str, *, decoder: bool = False) -> Encoded:
        """text as the model reads it: [BOS] (with prepend_bos) + the tokenizer's tokens (no other special tokens),
        cut to max_tokens; the ids of model.to_tokens(text) when prepend_bos is cfg.default_prepend_bos."""
        if decoder:
            raise ValueError(f"{self.name} has no decoder input of its own (decoder=True is for encoder-decoders)")
        from .encoded import CHARS_PER_TOKEN

        text = text[: CHARS_PER_TOKEN * self.max_tokens]
        full = [self.tokenizer.bos_token_id] if self.prepend_bos else []
        full += self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
        ids = full[: self.max_tokens]
        if not ids:
            raise ValueError(f"{text!r} has no tokens")
        return Encoded(tuple(ids), token_labels(self.tokenizer, ids), len(full) - len(ids))

    def tokens(self, text: str, *, decoder: bool = False) -> list[str]:
        """The model's tokens for text, [BOS] included when prepend_bos."""
        return list(self.encode(text, decoder=decoder).tokens)

    def coverage(self, text: str) -> Coverage:
        """How many of text's tokens are the tokenizer's unknown token (none for byte-level tokenizers)."""
        enc = self.encode(text)
        unk = self.tokenizer.unk_token_id
        ids = [i for i in enc.ids if i not in set(self.tokenizer.all_special_ids) or i == unk]
        return Coverage(len(ids), sum(i == unk for i in ids) if unk is not None else 0, 0)

    # Traces

    def trace(self, text: str, layer: int, *, part: str | None = None, decoder_text: str | None = None,
              head_mask: Sequence[float] | None = None, strict: bool | None = None) -> AttentionTrace:
        """Every intermediate of one attention layer, checked against TransformerLens's cache (meta["check"]).

        head_mask (one value per head; 1 keeps a head, 0 knocks it out) scales that layer's hook_z heads inside the
        real model. meta: model, architecture, part, layer, truncated, head_mask, check. A check beyond rounding warns
        (TraceCheckWarning); strict (default: the model's strict) raises TraceCheckError instead.
        """
        part = self._part(part, decoder_text)
        layer = self._layer(layer)
        mask = None if head_mask is None else self._mask(head_mask, "head_mask")
        traces = self._traces(text, [layer], part, mask)
        verify(traces, strict=self.strict if strict is None else strict)
        return traces[0]

    def traces(self, text: str, *, part: str | None = None, decoder_text: str | None = None,
               strict: bool | None = None) -> tuple[AttentionTrace, ...]:
        """Every layer from one forward pass: traces(text)[layer] equals trace(text, layer); checked as trace() is."""
        part = self._part(part, decoder_text)
        traces = tuple(self._traces(text, range(self.cfg.n_layers), part, None))
        verify(traces, strict=self.strict if strict is None else strict)
        return traces

    def attentions(self, text: str, *, part: str | None = None, decoder_text: str | None = None) -> np.ndarray:
        """TransformerLens's own hook_pattern for every layer: [layers, heads, T, T]."""
        self._part(part, decoder_text)
        return self.attentions_for_ids(self.encode(text).ids)

    def attentions_for_ids(self, ids: Sequence[int]) -> np.ndarray:
        """hook_pattern [layers, heads, T, T] for token ids exactly as given (no BOS added, nothing cut)."""
        ids = list(ids)
        if not 1 <= len(ids) <= self.max_tokens:
            raise ValueError(f"need 1 ... {self.max_tokens} token ids for {self.name}, got {len(ids)}")
        if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) and 0 <= i < self.vocab_size
                   for i in ids):
            raise ValueError(f"token ids must be integers in 0 ... {self.vocab_size - 1} for {self.name}")
        patterns: dict[int, Tensor] = {}
        hooks = [(f"blocks.{layer}.attn.hook_pattern", self._keep(patterns, layer)) for layer in range(self.cfg.n_layers)]
        with self._lock:
            self._run([int(i) for i in ids], hooks)
        return np.stack([to_numpy(patterns[layer]) for layer in range(self.cfg.n_layers)])

    def _traces(self, text: str, layers: Sequence[int], part: str, mask: Tensor | None) -> list[AttentionTrace]:
        enc = self.encode(text)
        names = ["hook_q", "hook_k", "hook_v", "hook_pattern", "hook_attn_scores"]
        if self.cfg.positional_embedding_type == "rotary":
            names += ["hook_rot_q", "hook_rot_k"]
        store: dict[tuple[int, str], Tensor] = {}
        hooks: list[tuple[str, Callable]] = []
        for layer in layers:
            hooks += [(f"blocks.{layer}.attn.{n}", self._keep(store, (layer, n))) for n in names]
            hooks.append((f"blocks.{layer}.attn.hook_z", self._scale_z(mask, store, (layer, "hook_z"))))
            hooks.append((f"blocks.{layer}.hook_attn_out", self._keep(store, (layer, "hook_attn_out"))))
        with self._lock:
            self._run(list(enc.ids), hooks)
        meta = {"model": self.name, "architecture": self.architecture, "part": part, "truncated": enc.dropped,
                "head_mask": None if mask is None else mask.tolist()}
        return [self._rebuild(enc.tokens, layer, {n: store[(layer, n)] for n in [*names, "hook_z", "hook_attn_out"]},
                              mask, meta) for layer in layers]

    def _rebuild(self, tokens: tuple[str, ...], layer: int, rec: dict[str, Tensor], mask: Tensor | None,
                 meta: dict[str, Any]) -> AttentionTrace:
        """One layer's trace from what the hooks recorded (batch dropped), computed in float32."""
        cfg, attn = self.cfg, self.hooked.blocks[layer].attn
        H = cfg.n_heads
        q = rec["hook_q"].float().transpose(0, 1)  # (H, T, d_k)
        k, v = (rec[n].float().transpose(0, 1) for n in ("hook_k", "hook_v"))  # (KV, T, d)
        KV = k.shape[0]
        kv_heads = tuple(h // (H // KV) for h in range(H))  # query head h reads K/V head h // (H / KV)
        k, v = k[list(kv_heads)], v[list(kv_heads)]  # (H, T, d_k), (H, T, d_v)
        a = attend(q, k, v, self.variations(layer, q.shape[1]), mask)
        concat = rec["hook_z"].float().flatten(1)  # (T, H*d_v): what W_O read (after the head mask)
        output = rec["hook_attn_out"].float()  # (T, d_model)
        W_O = attn.W_O.detach().float().flatten(0, 1).T  # (d_model, H*d_v): [H, d_v, d_model] in Linear layout
        b_O = attn.b_O.detach().float()  # (d_model,)
        check = {
            "weights vs hook_pattern": max_abs_diff(a.weights, rec["hook_pattern"]),
            "head outputs vs hook_z": max_abs_diff(a.concat, concat),
            "concat @ W_O^T + b vs hook_attn_out": max_abs_diff(concat @ W_O.T + b_O, output),
        }
        if "hook_rot_q" in rec:
            check["rotated queries vs hook_rot_q"] = max_abs_diff(a.queries, rec["hook_rot_q"].transpose(0, 1))
        weights = {name: to_numpy(getattr(attn, name)) for name in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V")}
        var_window = self._window(attn)
        return AttentionTrace(
            query_tokens=tokens,
            key_tokens=tokens,
            weights=to_numpy(a.weights),
            queries=to_numpy(a.queries),
            keys=to_numpy(a.keys),
            values=to_numpy(v),
            scores=to_numpy(a.scores),
            head_outputs=to_numpy(a.head_outputs),
            concat=to_numpy(concat),
            output=to_numpy(output),
            W_O=to_numpy(W_O),
            b_O=to_numpy(b_O),
            **weights,  # W_Q [H, d_model, d_k]; W_K, W_V [H, d_model, d] (grouped K/V heads repeated); b_* [H, d]
            scale=1.0 / float(attn.attn_scale),
            softcap=self._softcap(),
            causal=self.kind == "decoder",
            kv_heads=kv_heads if KV != H else None,
            meta={**meta, "layer": layer, **({"window": var_window} if var_window else {}),
                  "model_dtype": str(cfg.dtype).removeprefix("torch."), "check": check},
        )

    def variations(self, layer: int, T: int) -> Variations:
        """attend()'s arguments for layer on T tokens: TransformerLens's scale, q/k norms, rotary buffers, soft-cap,
        masks; the same for every head."""
        attn = self.hooked.blocks[layer].attn
        rotary = None
        if self.cfg.positional_embedding_type == "rotary":
            rotary = (attn.rotary_cos[:T].float(), attn.rotary_sin[:T].float())  # (T, rotary_dim) each
        norms = {}
        if self.cfg.use_qk_norm:
            norms = {"q_norm": attn.q_norm, "k_norm": attn.k_norm}  # RMSNorm over d_head, per head
        return Variations(scale=1.0 / float(attn.attn_scale), rotary=rotary, softcap=self._softcap(),
                          causal=self.kind == "decoder", window=self._window(attn), **norms)

    def _softcap(self) -> float | None:
        cap = self.cfg.attn_scores_soft_cap
        return float(cap) if cap is not None and cap > 0 else None

    def _window(self, attn: Any) -> int | None:
        """A local layer's window (TransformerLens applies it with the causal mask only)."""
        return self.cfg.window_size if attn.attn_type == "local" and self.kind == "decoder" else None

    # Whole-model outputs, with heads knocked out

    @property
    def next_token_unavailable(self) -> str | None:
        """Why next_token_probs cannot run, or None when it can."""
        if self.kind != "decoder":
            return f"{self.name} attends in both directions (attention_dir 'bidirectional'): it predicts no next token"
        return None

    def next_token_probs(self, text: str, *, head_masks: dict[int, Sequence[float]] | None = None) -> np.ndarray:
        """softmax(logits) after the last token of text: [d_vocab_out]; head_masks {layer: one value per head} scale
        the heads' hook_z (0 knocks a head out)."""
        reason = self.next_token_unavailable
        if reason is not None:
            raise ValueError(f"next-token probabilities are unavailable: {reason}")
        hooks = self._mask_hooks(head_masks)
        with self._lock:
            logits = self._run(list(self.encode(text).ids), hooks, return_type="logits")  # (1, T, V)
        return to_numpy(logits[0, -1].float().softmax(-1))

    def final_hidden(self, text: str, *, part: str | None = None, decoder_text: str | None = None,
                     head_masks: dict[int, Sequence[float]] | None = None) -> np.ndarray:
        """What the unembedding reads: the last block's hook_resid_post through ln_final (where the model has a final
        norm), [T, d_model], with head_masks as in next_token_probs."""
        self._part(part, decoder_text)
        store: dict[str, Tensor] = {}
        hooks = [*self._mask_hooks(head_masks),
                 (f"blocks.{self.cfg.n_layers - 1}.hook_resid_post", self._keep(store, "resid"))]
        with self._lock, torch.no_grad():
            self._run(list(self.encode(text).ids), hooks)
            final = self.hooked.ln_final(store["resid"]) if hasattr(self.hooked, "ln_final") else store["resid"]
        return to_numpy(final)

    def generate(self, prompt: str, max_new_tokens: int, sampling: Sampling = GREEDY,
                 should_stop: Callable[[], bool] | None = None) -> Generation:
        """Write up to max_new_tokens tokens after prompt (read as encode() reads it, [BOS] first), as
        PretrainedModel.generate does (mha_viz.pretrained.generation), without a KV cache: one whole forward pass a
        step, whose hook_pattern rows of the last query are the step's attentions. Stops after the tokenizer's EOS, or
        before a token once should_stop() says so (asked from the second token on: stop_reason "stopped")."""
        check_request(self, max_new_tokens, sampling)
        enc = self.encode(prompt)
        room = self.max_tokens - len(enc.ids) - enc.dropped
        if max_new_tokens > room:
            raise ValueError(f"the prompt has {len(enc.ids) + enc.dropped} tokens and {self.name} reads at most "
                             f"{self.max_tokens}: " + (f"at most {room} new tokens fit, not {max_new_tokens}"
                                                       if room > 0 else "no room for new tokens"))
        generator = torch.Generator(device=self.cfg.device).manual_seed(sampling.seed)
        ids, steps, stop_reason = list(enc.ids), [], "max_new_tokens"
        L = self.cfg.n_layers
        for t in range(int(max_new_tokens)):
            if stop_asked(should_stop, t):
                stop_reason = "stopped"
                break
            patterns: dict[int, Tensor] = {}
            hooks = [(f"blocks.{layer}.attn.hook_pattern", self._keep(patterns, layer)) for layer in range(L)]
            with self._lock:
                logits = self._run(ids, hooks, return_type="logits")[0, -1].float()  # (V,)
            probs = sampling_distribution(logits, sampling)  # (V,)
            token_id = int(logits.argmax()) if sampling.greedy else int(torch.multinomial(probs, 1, generator=generator))
            attentions = torch.stack([patterns[layer][:, -1] for layer in range(L)])  # (L, H, keys)
            steps.append(GenerationStep(token_id, id_label(self.tokenizer, token_id), to_numpy(probs),
                                        to_numpy(attentions)))
            if token_id == self.tokenizer.eos_token_id:
                stop_reason = "eos"
                break
            ids.append(token_id)
        return Generation(
            prompt_ids=enc.ids,
            prompt_tokens=enc.tokens,
            steps=tuple(steps),
            stop_reason=stop_reason,
            text=self.tokenizer.decode([s.token_id for s in steps], skip_special_tokens=True),
            sampling=sampling,
            windows=tuple(self._window(block.attn) for block in self.hooked.blocks),
        )

    def logit_attribution(self, text: str | None = None, *, ids: Sequence[int] | None = None, position: int = -1,
                          token: int | str | None = None) -> LogitAttribution:
        """Direct logit attribution as PretrainedModel.logit_attribution gives it (mha_viz.pretrained.attribution),
        from one forward pass's hook points at position: the embeddings (blocks.0.hook_resid_pre), each head's
        hook_z block times its W_O, each layer's b_O, each block's MLP (hook_resid_post - hook_resid_pre -
        hook_attn_out), through ln_final frozen at its scale on the last block's hook_resid_post."""
        reason = self.next_token_unavailable
        if reason is not None:
            raise ValueError(f"logit attribution is unavailable: {reason}")
        if self.cfg.normalization_type is None:
            raise ValueError(f"logit attribution is unavailable: {self.name} has no final norm to freeze")
        enc, position = checked_request(self, text, ids, position)
        store: dict[str, Tensor] = {}
        L = self.cfg.n_layers
        names = [f"blocks.{l}.{n}" for l in range(L) for n in ("hook_resid_pre", "attn.hook_z", "hook_attn_out",
                                                                  "hook_resid_post")]
        with self._lock:
            logits = self._run(list(enc.ids), [(n, self._keep(store, n)) for n in names], "logits")[0, position]
        token_id = int(logits.argmax()) if token is None else vocab_id(self, token, logits.shape[-1])
        at = {name: t[position].double().cpu() for name, t in store.items()}  # each (d,), or (H, d_head) for z
        parts: dict[str, Tensor] = {"embeddings": at["blocks.0.hook_resid_pre"]}
        heads = []  # per layer (H, d)
        for l, block in enumerate(self.hooked.blocks):
            heads.append(torch.einsum("hv,hvd->hd", at[f"blocks.{l}.attn.hook_z"], block.attn.W_O.detach().double().cpu()))
            parts[f"layer {l} attention bias"] = block.attn.b_O.detach().double().cpu()  # (d,)
            parts[f"layer {l} MLP"] = (at[f"blocks.{l}.hook_resid_post"] - at[f"blocks.{l}.hook_resid_pre"]
                                       - at[f"blocks.{l}.hook_attn_out"])  # (d,)
        final = self.hooked.ln_final
        d = self.cfg.d_model
        gamma, beta = (getattr(final, n, None) for n in ("w", "b"))
        affine = NormAffine("RMSNorm" if self.cfg.normalization_type in ("RMS", "RMSPre") else "LayerNorm",
                            torch.ones(d, dtype=torch.float64) if gamma is None else gamma.detach().double().cpu(),
                            None if beta is None else beta.detach().double().cpu(), self.cfg.eps)
        u = self.hooked.W_U[:, token_id].detach().double().cpu()  # (d,)
        return split_logit(enc, position, token_id, id_label(self.tokenizer, token_id),
                           logits.double().cpu(), parts, torch.stack(heads), at[f"blocks.{L - 1}.hook_resid_post"],
                           affine, u, float(self.hooked.b_U[token_id].detach()))

    # Helpers

    def head_weights(self, part: str | None = None) -> HeadWeights:
        """Every head's weights with the norms folded (mha_viz.weights.HeadWeights), from hooked_weights: each
        block's ln1 folded into W_Q, W_K, W_V and ln_final into W_U where TransformerLens has not folded them already
        (normalization "LN"/"RMS"; "LNPre"/"RMSPre" hold folded weights), LayerNorm readers and writers centred."""
        self._part(part)
        w = hooked_weights(self)
        norm = {"LN": "LayerNorm", "LNPre": "LayerNorm", "RMS": "RMSNorm", "RMSPre": "RMSNorm"}.get(w["normalization"])
        centre = norm == "LayerNorm"
        if w["normalization"] in ("LN", "RMS"):
            for layer, block in enumerate(self.hooked.blocks):
                gamma, beta = (None if p is None else to_numpy(p) for p in (block.ln1.w, getattr(block.ln1, "b", None)))
                for x in "QKV":
                    w[f"W_{x}"][layer], w[f"b_{x}"][layer] = fold_reader(w[f"W_{x}"][layer], w[f"b_{x}"][layer], gamma,
                                                                         beta, centre)
            final = self.hooked.ln_final
            beta = getattr(final, "b", None)
            w["W_U"], w["b_U"] = fold_reader(w["W_U"], w["b_U"], to_numpy(final.w), None if beta is None else to_numpy(beta),
                                             centre)
        elif centre:  # LNPre: the norms' weights are folded already; the centring is redone (idempotent)
            for x in "QKV":
                w[f"W_{x}"] = w[f"W_{x}"] - w[f"W_{x}"].mean(axis=-2, keepdims=True)
            w["W_U"] = w["W_U"] - w["W_U"].mean(axis=0, keepdims=True)
        if centre:
            w["W_O"], w["b_O"], w["W_E"], w["W_pos"] = (centre_writer(w[n]) for n in ("W_O", "b_O", "W_E", "W_pos"))
        folded = {"LN": "each block's ln1 folded into W_Q, W_K, W_V and ln_final into W_U",
                  "RMS": "each block's ln1 folded into W_Q, W_K, W_V and ln_final into W_U",
                  "LNPre": "the norms' weights were folded by TransformerLens already",
                  "RMSPre": "the norms' weights were folded by TransformerLens already"}.get(w["normalization"],
                                                                                             "no norms: nothing to fold")
        if centre:
            folded += "; readers and writers centred (the mean over d_model removed), as a LayerNorm reads them"
        return HeadWeights(
            **{n: w[n] for n in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "W_E", "W_pos", "W_U", "b_U")},
            vocab=vocabulary(self.tokenizer, w["W_E"].shape[0]),
            norm=norm, folded=folded + "; the input-dependent 1/s of the norm is left out", name=self.name,
        )

    def record(self, ids: Sequence[int], names: Sequence[str]) -> dict[str, Tensor]:
        """The named hook points' activations (batch dropped) from one forward pass on ids."""
        store: dict[str, Tensor] = {}
        with self._lock:
            self._run(list(ids), [(name, self._keep(store, name)) for name in names])
        return store

    def _run(self, ids: list[int], hooks: list[tuple[str, Callable]], return_type: str | None = None) -> Any:
        """One forward pass on ids (batch of one) with hooks on; the caller holds the lock."""
        tokens = torch.tensor([ids], device=self.cfg.device)  # (1, T)
        with torch.no_grad(), self.hooked.hooks(fwd_hooks=hooks):
            return self.hooked(tokens, return_type=return_type)

    @staticmethod
    def _keep(store: dict, key: Any) -> Callable[[Tensor, Any], None]:
        def hook(activation: Tensor, hook: Any) -> None:
            store[key] = activation.detach()[0]

        return hook

    def _scale_z(self, mask: Tensor | None, store: dict | None = None, key: Any = None
                 ) -> Callable[[Tensor, Any], Tensor | None]:
        """A hook on hook_z [batch, pos, head, d_head]: scales head h by mask[h] (if any), keeps the result."""

        def hook(z: Tensor, hook: Any) -> Tensor | None:
            if mask is not None:
                z = z * mask.to(z)[:, None]  # (1, T, H, d_v)
            if store is not None:
                store[key] = z.detach()[0]
            return z if mask is not None else None

        return hook

    def _mask_hooks(self, head_masks: dict[int, Sequence[float]] | None) -> list[tuple[str, Callable]]:
        return [(f"blocks.{self._layer(layer)}.attn.hook_z", self._scale_z(self._mask(values, f"head_masks[{layer}]")))
                for layer, values in (head_masks or {}).items()]

    def _mask(self, values: Sequence[float], what: str) -> Tensor:
        mask = torch.as_tensor(np.asarray(values, dtype=np.float32))  # (H,)
        if mask.shape != (self.cfg.n_heads,) or not torch.isfinite(mask).all():
            raise ValueError(f"{what} needs {self.cfg.n_heads} finite values, one per head")
        return mask

    def _part(self, part: str | None, decoder_text: str | None = None) -> str:
        if decoder_text is not None:
            raise ValueError(f"decoder_text is for encoder-decoder models; {self.name} is a {self.kind} model")
        if part is not None and part not in self.parts:
            raise ValueError(f"part must be one of {self.parts} for {self.name}, got {part!r}")
        return self.kind

    def _layer(self, layer: int) -> int:
        n = self.cfg.n_layers
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 0 <= layer < n:
            raise IndexError(f"layer must be 0 ... {n - 1} for {self.name}, got {layer!r}")
        return int(layer)


def hooked_weights(model: Any) -> dict[str, Any]:
    """A HookedTransformer's (or a HookedModel's) weights as float32 numpy, in TransformerLens's layout.

        W_Q, W_K, W_V  [layers, H, d_model, d_head]   (grouped-query K/V heads repeated: one per query head)
        b_Q, b_K, b_V  [layers, H, d_head]
        W_O            [layers, H, d_head, d_model]   b_O [layers, d_model]
        W_E [d_vocab, d_model]   W_pos [n_ctx, d_model] or None (rotary: no position table)
        W_U [d_model, d_vocab_out]   b_U [d_vocab_out]
    and the state of the norms: normalization ("LN", "LNPre", "RMS", "RMSPre" or None: cfg.normalization_type) and
    ln_folded (True for "LNPre"/"RMSPre": TransformerLens already folded the norms' weights into the next matrices,
    what is left is centring and scaling), positional_embedding_type.
    """
    hooked = model.hooked if isinstance(model, HookedModel) else model
    if not is_hooked_transformer(hooked):
        raise TypeError(f"hooked_weights needs a HookedTransformer or a HookedModel, got {type(model).__name__}")
    cfg = hooked.cfg
    out: dict[str, Any] = {name: to_numpy(getattr(hooked, name))
                           for name in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O", "W_E", "W_U", "b_U")}
    out["W_pos"] = to_numpy(hooked.W_pos) if cfg.positional_embedding_type in ("standard", "shortformer") else None
    out["normalization"] = cfg.normalization_type
    out["ln_folded"] = cfg.normalization_type in ("LNPre", "RMSPre")
    out["positional_embedding_type"] = cfg.positional_embedding_type
    return out

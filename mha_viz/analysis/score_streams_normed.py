"""Score attribution's streams that pass a norm at every step: a post-norm encoder (BERT, MiniLM, ALBERT, DeBERTa),
whose LayerNorms come after each sublayer, and a decoder whose blocks normalise the stream itself (MiniMax). Every
norm on the way is frozen at its scale at each position (score_frozen), so each source goes through it, and the
norms' shifts and the output projections' biases join one constant source, "biases (norms, W_O)".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from .score_frozen import Frozen
from .score_streams import Stream, head_parts

if TYPE_CHECKING:
    from ..pretrained.model import PretrainedModel


class EncoderStream(Stream):
    """A post-norm encoder (BERT, MiniLM): layer L's input x (T, d) split into its sources. Each LayerNorm on the way,
    the embeddings' and each earlier layer's two, is frozen at its scale at each position, so it is affine and every
    source goes through it: gamma * centre(src) / s, its beta into the constant source "biases (norms, W_O)" (with
    each W_O's bias). An earlier layer's MLP is its output norm's input minus its attention norm's output. ALBERT runs
    one layer's modules once per layer: layer l reads their site.call-th call. DeBERTa's embeddings projected before
    their norm (embedding_size != hidden_size) go through the projection first, each source alone (linear); its conv
    layer (conv_kernel_size) adds act(conv(layer 0's input)) to layer 0's output, one more source "conv" (measured,
    as an MLP is), and normalises that sum, frozen like the others, before layer 1."""

    def __init__(self, model: PretrainedModel, ids: Sequence[int], layer: int) -> None:
        from ..pretrained.adapter import Recorder
        from .score_streams import Calls

        adapter, self.model, self.part = model.adapter, model, "encoder"
        post = adapter.post_norms()
        sites = [adapter.site("encoder", i) for i in range(layer + 1)]
        extra = [m for m in (post.before, post.conv) if m is not None]  # DeBERTa's projection, its conv layer's norm
        with (Calls([post.embeddings, *post.attention[:layer], *post.output[:layer], *extra,
                     *(s.out for s in sites[:-1])]) as seen,
              Recorder(sites[-1]) as rec):  # every norm's input and output, each concat, call by call
            outputs = adapter.forward(list(ids))
        embedded = seen.input(post.embeddings if post.before is None else post.before, 0)  # (T, e) the embeddings' sum
        ids_t = torch.tensor([list(ids)], device=adapter.device())
        sources = {"token": post.word(ids_t)[0].detach().double().cpu()}  # (T, e)
        if post.token_type is not None:
            sources["token type"] = post.token_type(torch.zeros_like(ids_t))[0].detach().double().cpu()
        position = embedded - sum(sources.values())  # what the embeddings add by position
        if position.abs().max() > 0:  # none in a DeBERTa without position_biased_input
            sources["position"] = position
        constant = torch.zeros_like(sources["token"])  # (T, e)
        self.residual_error = self.post_error = 0.0
        if post.before is not None:  # DeBERTa: the sum projected to the model's width before its norm (linear)
            sources, constant = self._projected(post.before, sources, constant)
        sources, constant = self._normed(post.embeddings, sources, constant, seen.input(post.embeddings, 0))
        if post.project is not None:  # ELECTRA, ALBERT: the normed embeddings projected to the model's width (affine)
            sources, constant = self._projected(post.project, sources, constant)
        for i, site in enumerate(sites[:-1]):  # layer i: its modules' site.call-th call (ALBERT shares them)
            heads, b_O = head_parts(adapter, site, seen.input(site.out, site.call))  # (H, T, d), (d,)
            sources |= {f"{i}.{h}": head for h, head in enumerate(heads)}
            if b_O is not None:
                constant = constant + b_O
            sources, constant = self._normed(post.attention[i], sources, constant,
                                             seen.input(post.attention[i], site.call))
            mlp_in = seen.input(post.output[i], site.call)  # the MLP's output plus the attention norm's
            sources[f"{i} MLP"] = mlp_in - seen.output(post.attention[i], site.call)
            sources, constant = self._normed(post.output[i], sources, constant, mlp_in)
            if i == 0 and post.conv is not None:  # DeBERTa-v2: LayerNorm(layer 0's output + act(conv(layer 0's input)))
                conv_in = seen.input(post.conv, 0)  # (T, d) layer 0's output plus the conv branch
                sources["conv"] = conv_in - seen.output(post.output[0], 0)  # the branch, measured (nonlinear)
                sources, constant = self._normed(post.conv, sources, constant, conv_in)
        sources["biases (norms, W_O)"] = constant
        self.sources = {name: src.float() for name, src in sources.items()}
        self._rebuild(sites[-1], rec, outputs, layer, "encoder")
        self.x = self.attention_input  # (T, d) no norm before the attention
        self.residual_error = max(self.residual_error, float((sum(sources.values()) - self.x).abs().max()))

    @staticmethod
    def _projected(linear: nn.Linear, sources: dict[str, Tensor], constant: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        """sources and the constant (T, e) through linear: src W^T (T, d) each, the constant's c W^T + b."""
        from ..pretrained.adapter import loaded

        with loaded(linear):
            W = linear.weight.detach().double().cpu()  # (d, e)
            b = 0 if linear.bias is None else linear.bias.detach().double().cpu()  # (d,)
        constant = constant @ W.T + b
        return {name: src @ W.T for name, src in sources.items()}, constant

    def _normed(self, norm: nn.Module, sources: dict[str, Tensor], constant: Tensor, received: Tensor
                ) -> tuple[dict[str, Tensor], Tensor]:
        """sources and the constant through norm frozen at its scale on what it received (T, d); the sources' sum
        against that input goes into residual_error."""
        self.residual_error = max(self.residual_error, float((sum(sources.values()) + constant - received).abs().max()))
        frozen = Frozen.of(norm, received, self.model.adapter.norm_weight_offset)  # scales (T,)
        normed = {name: frozen.linear(src) for name, src in sources.items()}
        return normed, frozen.linear(constant) + (0 if frozen.beta is None else frozen.beta)


class NormedStream(EncoderStream):
    """A decoder whose blocks normalise the stream itself (MiniMax, adapter.normed_block): block l maps x to
        n1 = input_norm(x),  n2 = post_norm(alpha_a n1 + beta_a attention(n1)),  x' = alpha_m n2 + beta_m MLP(n2)
    Each norm is frozen at its scale per position, as in a post-norm encoder, and every source goes through it;
    the attention's heads (times beta_a) join after input_norm, MLP_l = x' - alpha_m n2 after post_norm. Layer L
    reads input_norm(x_L): the frozen pre-attention norm, as in Stream."""

    def __init__(self, model: PretrainedModel, ids: Sequence[int], layer: int) -> None:
        from ..pretrained.adapter import Recorder
        from ..pretrained.attribution import Capture

        adapter, self.model, self.part = model.adapter, model, "decoder"
        steps = [adapter.normed_block(i) for i in range(layer + 1)]
        norms = [*(n for step in steps[:-1] for n in (step.input_norm, step.post_norm)), steps[-1].input_norm]
        sites = [adapter.site("decoder", i) for i in range(layer + 1)]
        self.inner = {}
        with (Capture(norms, [site.out for site in sites[:-1]], None, slice(None)) as capture,
              Recorder(sites[-1]) as rec):  # every norm's input and output, each concat
            outputs = adapter.forward(list(ids))
        self.call = dict(rec.arguments)
        embeddings = capture.block_in[0]  # (T, d)
        token = model.model.get_input_embeddings()(torch.tensor([list(ids)], device=adapter.device()))[0]
        sources = {"token" if torch.allclose(embeddings, token.double().cpu()) else "embeddings": embeddings}
        constant = torch.zeros_like(embeddings)  # (T, d)
        self.residual_error = self.post_error = 0.0
        for i, (step, site) in enumerate(zip(steps[:-1], sites[:-1], strict=True)):
            (alpha_a, beta_a), alpha_m = step.attention, step.mlp[0]  # beta_m: inside the MLP source
            sources, constant = self._normed(step.input_norm, sources, constant, capture.block_in[2 * i])
            sources, constant = {n: alpha_a * src for n, src in sources.items()}, alpha_a * constant
            heads, b_O = head_parts(adapter, site, capture.concat[i])  # (H, T, d), (d,)
            sources |= {f"{i}.{h}": beta_a * head for h, head in enumerate(heads)}
            if b_O is not None:
                constant = constant + beta_a * b_O
            sources, constant = self._normed(step.post_norm, sources, constant, capture.block_in[2 * i + 1])
            sources, constant = {n: alpha_m * src for n, src in sources.items()}, alpha_m * constant
            sources[f"{i} MLP"] = capture.block_in[2 * i + 2] - alpha_m * capture.block_out[2 * i + 1]
        self.x = capture.block_in[2 * layer]  # (T, d): layer L's block input
        sources["biases (norms, W_O)"] = constant
        zero = 1e-6 * float(self.x.abs().max())  # a part that adds 0 (RMSNorms and no W_O bias: the constant)
        self.sources = {name: src.float() for name, src in sources.items() if src.abs().amax() > zero}
        self.residual_error = max(self.residual_error, float((sum(sources.values()) - self.x).abs().max()))
        self._rebuild(sites[-1], rec, outputs, layer, "decoder")

"""The bundled long-context models: mha-viz/recall-16k, a 2-layer attention-only SmolLM3 that finds a needle 16,384
tokens back, and mha-viz/hybrid-2l, the same task learned by a Gated DeltaNet layer (linear attention) and an attention
layer (a Qwen3.5 hybrid).

Vocabulary: induction-2l's (mha_viz.training.induction: <bos>, <unk>, lowercase words, '.' and ','), its 25 animal
names reserved as KEYS: they occur only in needles and queries, never in the haystack.

Data: each sequence is <bos>, then a haystack of words drawn uniformly (with replacement) from the other words, with
n ~ U{1 .. max_needles} needles "key value" (distinct keys, values from the haystack's words) written at random
places, then the n queries "key value" in a random order at the end:
    <bos> w w w K1 V1 w w w ... w K2 V2 w w ... w   K2 V2 K1 V1
Loss: next-token cross-entropy on each query's value (predicted at its key), averaged over the batch: the model
must find where its key was written and read the word that followed, however far back (associative recall).

recall-16k (Recipe()): SmolLM3ForCausalLM, 2 layers, 4 heads of 32 dims, d_model 128, max_position_embeddings
16,384, untied unembedding; layer 0 rotates q and k (RoPE, base rope_theta) within a 16-token window, layer 1 uses
no positions (NoPE). It trains on seq_len tokens and reads 16,384: the window and NoPE see the same at any length.
hybrid-2l (HYBRID): Qwen3_5ForCausalLM of the same sizes; layer 0 is a Gated DeltaNet (linear attention: its heads'
mixing matrices are mha_viz.mixers', its short convolution mixes each token with the 3 before it), layer 1 full
attention with Qwen3.5's output gate and rotary positions on a quarter of each head.
The MLPs have one hidden unit, and their weights are zero and frozen (as is post_attention_layernorm, which only
feeds them), so MLP(x) = down(SiLU(0) * 0) = 0 exactly: the models are attention-only (mixer-only).

Training: Adam at a constant lr, one fresh batch per step, seeded initialisation and data, one torch thread and
torch.use_deterministic_algorithms(True): the same Recipe on the same torch build and CPU gives bit-for-bit the same
weights (scripts/train_recall_model.py --check).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .induction import BOS, FIRST_WORD_ID, VOCABULARY, build_tokenizer
from .tasks import IGNORE
from .trainer import torch_threads

if TYPE_CHECKING:
    from transformers import PreTrainedModel

KEYS: tuple[str, ...] = (
    "cat", "dog", "fox", "owl", "bee", "cow", "pig", "hen", "rat", "bat", "ant", "elk", "yak", "bird", "fish",
    "frog", "duck", "goat", "lion", "wolf", "bear", "deer", "mouse", "horse", "sheep",
)  # fmt: skip
KEY_IDS = torch.tensor([VOCABULARY.index(k) for k in KEYS])
WORD_IDS = torch.tensor([i for i in range(FIRST_WORD_ID, len(VOCABULARY)) if VOCABULARY[i] not in KEYS])
POSITIONS = 16384  # what the model reads: max_position_embeddings
FULL_TOKENS = 512  # the tokenizer's model_max_length: the longest input traced in full ([H, T, T]); longer ones
# get a long trace (PretrainedModel.long_trace), which reads every position
GENERATED_FILES = (
    "config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
    "recipe.json",
)  # fmt: skip


@dataclass(frozen=True)
class Recipe:
    """Everything that determines the trained weights (with the torch build and the CPU)."""

    steps: int = 3500
    batch_size: int = 32
    lr: float = 1e-3
    seed: int = 0
    seq_len: int = 128  # tokens per training sequence, <bos> included
    max_needles: int = 4
    # then longer sequences, (steps, seq_len, batch_size) each, so that the heads stay sharp among many more keys
    longer: tuple[tuple[int, int, int], ...] = ((400, 1024, 8),)
    rope_theta: float = 1e4
    rotary_layers: int = 1  # the first layers rotate q and k (RoPE); the others use no positions at all (NoPE)
    window: int | None = 16  # the rotary layers see only this many tokens (a sliding window), whatever the length
    # not empty: a hybrid Qwen3.5 (qwen3_5_text) whose layers of these numbers are Gated DeltaNet (linear attention:
    # no positions, a state of fixed size) and the others full attention rotating a quarter of each head's dimensions
    # (Qwen3.5's partial rotary); rotary_layers and window must then be 0 and None
    linear_layers: tuple[int, ...] = ()
    d_model: int = 128
    num_heads: int = 4
    num_layers: int = 2
    threads: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.max_needles <= len(KEYS) or self.seq_len < 1 + 4 * self.max_needles + 8:
            raise ValueError(f"need 1 <= max_needles <= {len(KEYS)} and room for them in seq_len, got {self}")
        if self.steps < 1 or self.batch_size < 1 or self.d_model % self.num_heads:
            raise ValueError(f"need steps, batch_size >= 1 and num_heads dividing d_model, got {self}")
        if any(n < 0 or not 1 + 4 * self.max_needles + 8 <= T <= POSITIONS or b < 1 for n, T, b in self.longer):
            raise ValueError(f"need each longer stage's (steps >= 0, seq_len <= {POSITIONS}, batch >= 1), got {self}")
        if self.linear_layers and (self.rotary_layers or self.window is not None
                                   or not set(self.linear_layers) < set(range(self.num_layers))):
            raise ValueError(f"a hybrid (linear_layers) needs rotary_layers = 0, window = None, layer numbers below "
                             f"num_layers and at least one attention layer, got {self}")

    def stages(self) -> list[tuple[int, int, int]]:
        """(steps, seq_len, batch_size) of each stage, in order: the first one's, then the longer ones."""
        return [(self.steps, self.seq_len, self.batch_size), *self.longer]


HYBRID = Recipe(linear_layers=(0,), rotary_layers=0, window=None)  # hybrid-2l's recipe: the rest as recall-16k's
RECIPES = {"mha-viz/recall-16k": Recipe(), "mha-viz/hybrid-2l": HYBRID}  # each bundled model's recipe, by name


def build_model(recipe: Recipe) -> PreTrainedModel:
    """A freshly initialised causal LM (seeded; the global RNG is left alone), MLPs zeroed and frozen: SmolLM3, or
    Qwen3.5 with Gated DeltaNet layers at recipe.linear_layers."""
    from transformers import AutoModelForCausalLM, Qwen3_5TextConfig, SmolLM3Config

    common = dict(
        vocab_size=len(VOCABULARY),
        hidden_size=recipe.d_model,
        intermediate_size=1,  # the smallest MLP; zero and frozen below
        num_hidden_layers=recipe.num_layers,
        num_attention_heads=recipe.num_heads,
        num_key_value_heads=recipe.num_heads,
        max_position_embeddings=POSITIONS,
        tie_word_embeddings=False,
        bos_token_id=VOCABULARY.index(BOS),
        eos_token_id=None,
        pad_token_id=None,
    )
    head_dim = recipe.d_model // recipe.num_heads
    if recipe.linear_layers:
        config = Qwen3_5TextConfig(
            **common, head_dim=head_dim, linear_num_key_heads=recipe.num_heads, linear_num_value_heads=recipe.num_heads,
            linear_key_head_dim=head_dim, linear_value_head_dim=head_dim,
            rope_parameters={"rope_type": "default", "rope_theta": recipe.rope_theta, "partial_rotary_factor": 0.25},
            layer_types=[("linear_attention" if layer in recipe.linear_layers else "full_attention")
                         for layer in range(recipe.num_layers)],
        )
    else:
        config = SmolLM3Config(
            **common,
            rope_parameters={"rope_type": "default", "rope_theta": recipe.rope_theta},
            no_rope_layers=[int(layer < recipe.rotary_layers) for layer in range(recipe.num_layers)],  # 0: no positions
            use_sliding_window=recipe.window is not None,
            sliding_window=recipe.window,
            layer_types=[("sliding_attention" if recipe.window and layer < recipe.rotary_layers else "full_attention")
                         for layer in range(recipe.num_layers)],
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(recipe.seed)
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    for block in model.model.layers:
        for p in (*block.mlp.parameters(), *block.post_attention_layernorm.parameters()):
            p.requires_grad_(False)
        with torch.no_grad():
            for p in block.mlp.parameters():
                p.zero_()
    return model


def sample(length: int, needles: int, generator: torch.Generator, *, copy: bool = False) -> tuple[Tensor, Tensor]:
    """One sequence (length,) of <bos>, haystack, needles and queries (see the module docstring), and (length,) True
    at each query's value (the token its key makes predictable); copy: also a stretch of 8 to 64 haystack words
    copied to a later place in the haystack, predictable from its second word on (training data)."""
    queries = 2 * needles
    tokens = WORD_IDS[torch.randint(len(WORD_IDS), (length,), generator=generator)]  # (length,)
    tokens[0] = VOCABULARY.index(BOS)
    keys = KEY_IDS[torch.randperm(len(KEY_IDS), generator=generator)[:needles]]  # (n,) distinct
    values = WORD_IDS[torch.randint(len(WORD_IDS), (needles,), generator=generator)]  # (n,)
    haystack = length - 1 - queries  # positions 1 ... haystack hold the haystack and the needles
    slots = torch.randperm(haystack // 2, generator=generator)[:needles] * 2 + 1  # needle starts, never overlapping
    tokens[slots], tokens[slots + 1] = keys, values
    order = torch.randperm(needles, generator=generator)
    end = torch.arange(length - queries, length, 2)  # (n,) where the queries' keys go
    tokens[end], tokens[end + 1] = keys[order], values[order]
    predictable = torch.zeros(length, dtype=torch.bool)
    predictable[end + 1] = True
    if copy:  # a stretch of the haystack copied later (as induction-2l's data): many targets for the same circuit
        s = int(torch.randint(8, min(64, haystack // 4) + 1, (), generator=generator))
        a = int(torch.randint(1, haystack - 2 * s, (), generator=generator))
        b = int(torch.randint(a + s, haystack - s + 1, (), generator=generator))
        needle = torch.zeros(length, dtype=torch.bool)
        needle[slots], needle[slots + 1] = True, True
        kept = ~torch.isin(tokens[a:a + s], KEY_IDS) & ~needle[b:b + s]  # no key copied, no needle overwritten
        tokens[b:b + s] = torch.where(kept, tokens[a:a + s], tokens[b:b + s])
        predictable[b + 1:b + s] |= kept[1:] & kept[:-1]  # predictable where the word before was copied too
    return tokens, predictable


def sample_batch(recipe: Recipe, generator: torch.Generator, length: int | None = None, batch: int | None = None
                 ) -> tuple[Tensor, Tensor]:
    """tokens (B, T) and predictable (B, T): batch (default recipe.batch_size) sequences of length (default
    recipe.seq_len), each with its own needle count and a copied stretch."""
    rows = [sample(length or recipe.seq_len, int(torch.randint(1, recipe.max_needles + 1, (), generator=generator)),
                   generator, copy=True) for _ in range(batch or recipe.batch_size)]
    return torch.stack([r[0] for r in rows]), torch.stack([r[1] for r in rows])


def recall_loss(logits: Tensor, tokens: Tensor, predictable: Tensor) -> Tensor:
    """mean over the (b, t) with predictable[b, t+1] of -log softmax(logits[b, t])[tokens[b, t+1]]; logits (B, T, V)."""
    targets = tokens[:, 1:].masked_fill(~predictable[:, 1:], IGNORE)  # (B, T-1)
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), targets.flatten(), ignore_index=IGNORE)


def train(recipe: Recipe = Recipe(), *, on_step: Callable[[int, float], None] | None = None) -> PreTrainedModel:
    """Train the model of `recipe`; on_step(step, loss) after every step. Returns the model in eval mode."""
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        with torch_threads(recipe.threads):
            model = build_model(recipe).train()
            optimiser = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=recipe.lr)
            generator = torch.Generator().manual_seed(recipe.seed)
            schedule = [(T, B) for steps, T, B in recipe.stages() for _ in range(steps)]
            for step, (T, B) in enumerate(schedule, 1):
                tokens, predictable = sample_batch(recipe, generator, T, B)  # (B, T), (B, T)
                loss = recall_loss(model(input_ids=tokens, use_cache=False).logits, tokens, predictable)
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                if on_step is not None:
                    on_step(step, loss.item())
    finally:
        torch.use_deterministic_algorithms(deterministic)
    return model.eval()


def example_text(length: int, needles: int = 4, seed: int = 0) -> str:
    """A sequence of `length` tokens (sample(): <bos>, a haystack with needles, the queries at the end; seeded) as
    text, without its <bos> (the tokenizer puts it back): what the app opens the model on."""
    tokens, _ = sample(length, needles, torch.Generator().manual_seed(seed))
    return " ".join(VOCABULARY[i] for i in tokens[1:].tolist())


@torch.no_grad()
def recall_accuracy(model: Any, length: int, *, sequences: int = 4, needles: int = 4, seed: int = 1) -> float:
    """The share of queries whose value is the model's top prediction at its key, over `sequences` fresh sequences of
    `length` tokens with `needles` needles each (seeded; not the training data's seed). model: a PretrainedModel or a
    causal LM; its attention runs through transformers' sdpa for the pass (no [H, T, T] tensor), then is restored."""
    lm = model if isinstance(model, torch.nn.Module) else model.model  # the causal LM
    generator = torch.Generator().manual_seed(seed)
    before = lm.config._attn_implementation
    lm.set_attn_implementation("sdpa")
    try:
        right = total = 0
        for _ in range(sequences):
            tokens, predictable = sample(length, needles, generator)  # (T,), (T,)
            at = predictable.nonzero()[:, 0]  # the values' positions
            logits = lm(input_ids=tokens[None], use_cache=False, logits_to_keep=0).logits[0]  # (T, V)
            right += int((logits[at - 1].argmax(-1) == tokens[at]).sum())
            total += len(at)
    finally:
        lm.set_attn_implementation(before)
    return right / total


def save(model: PreTrainedModel, recipe: Recipe, folder: Path) -> None:
    """config.json, generation_config.json, model.safetensors, tokenizer files and recipe.json into folder."""
    folder.mkdir(parents=True, exist_ok=True)
    model.config._attn_implementation = "eager"  # what a reader of the weights gets; the long kernel replaces it
    model.save_pretrained(folder)
    build_tokenizer(FULL_TOKENS).save_pretrained(folder)
    (folder / "recipe.json").write_text(json.dumps(asdict(recipe), indent=2) + "\n")

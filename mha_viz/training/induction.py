"""The bundled causal model mha-viz/induction-2l: a 2-layer attention-only GPT-2 that completes repeats.

Vocabulary: <bos> (id 0, put in front of every text by the tokenizer), <unk> (id 1: any other word or
symbol), then WORDS (lowercase; '.' and ',' included). Word-level: text is NFKC-normalised, lowercased
and split on whitespace and punctuation.

Data: each sequence is <bos> followed by L = seq_len - 1 words x[0 .. L-1] drawn uniformly (with
replacement) from WORDS; then a random segment is copied to a random later offset (a fixed offset would
let the model learn a positional shortcut instead of looking the words up):
    s ~ U{min_segment .. max_segment},  a ~ U{0 .. L - 2s},  b ~ U{a + s .. L - s},  x[b : b+s] = x[a : a+s]
Loss: next-token cross-entropy on the words that the copy makes predictable, x[b+1 .. b+s-1] (x[b]
itself is random), averaged over the batch. (With the loss on every position the signal is diluted by
the unpredictable words: in a 1,500-step trial the heads had not started to form.)

Model: GPT2LMHeadModel (2 layers, 4 heads of 32 dims, d_model 128, 128 positions, untied unembedding,
no dropout). GPT-2 blocks always have an MLP: here it has one hidden unit and its weights and biases
are zero and frozen (as is ln_2, which only feeds it), so MLP(x) = c_proj(gelu(0 x + 0)) = 0 exactly:
the model is attention-only.

Training: Adam at a constant lr, one fresh batch per step, seeded initialisation and data, one
torch thread and torch.use_deterministic_algorithms(True): the same Recipe on the same torch build
and CPU gives bit-for-bit the same weights (scripts/train_induction_model.py --check).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from .tasks import IGNORE
from .trainer import torch_threads

if TYPE_CHECKING:
    from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

BOS, UNK = "<bos>", "<unk>"
WORDS: tuple[str, ...] = (
    # colours
    "red", "blue", "green", "black", "white", "pink", "gold", "gray", "brown", "dark", "light",
    # animals
    "cat", "dog", "fox", "owl", "bee", "cow", "pig", "hen", "rat", "bat", "ant", "elk", "yak", "bird", "fish",
    "frog", "duck", "goat", "lion", "wolf", "bear", "deer", "mouse", "horse", "sheep",
    # nature
    "sky", "sun", "moon", "star", "sea", "rain", "snow", "wind", "tree", "leaf", "rose", "hill", "lake", "rock",
    "sand", "fire", "ice", "cloud", "river", "field", "grass", "stone", "wood",
    # things
    "cup", "pen", "box", "hat", "bag", "key", "map", "bed", "car", "bus", "ship", "boat", "book", "door", "lamp",
    "ball", "bell", "coin", "ring", "road", "town", "house", "chair", "table", "clock", "shoe", "coat",
    # food
    "tea", "jam", "pie", "egg", "milk", "rice", "bread", "cake", "soup", "salt", "corn", "plum", "pear", "lime",
    "apple", "honey",
    # people
    "man", "boy", "girl", "king", "queen", "baby", "friend", "mother", "father",
    # verbs
    "run", "sit", "jump", "sing", "read", "eat", "see", "fly", "swim", "walk", "sleep", "play", "make", "go",
    "get", "give", "take", "like", "love", "sat", "ran", "saw",
    # adjectives
    "big", "small", "old", "new", "hot", "cold", "fast", "slow", "happy", "sad", "good", "bad", "long", "tall",
    # small words
    "the", "a", "and", "of", "to", "in", "on", "is", "it", "my", "you", "we", "he", "she", "at", "by", "up", "not",
    # punctuation
    ".", ",",
)  # fmt: skip
VOCABULARY: tuple[str, ...] = (BOS, UNK, *WORDS)  # token id = index
FIRST_WORD_ID = 2
# what save() writes: all of it is reproduced bit for bit by scripts/train_induction_model.py
GENERATED_FILES = (
    "config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
    "recipe.json",
)  # fmt: skip


@dataclass(frozen=True)
class Recipe:
    """Everything that determines the trained weights (with the torch build and the CPU)."""

    steps: int = 3000
    batch_size: int = 32
    lr: float = 1e-3
    seed: int = 0
    seq_len: int = 128  # positions, <bos> included; also the model's n_positions
    min_segment: int = 2
    max_segment: int = 63  # at most (seq_len - 1) // 2
    d_model: int = 128
    num_heads: int = 4
    num_layers: int = 2
    threads: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.min_segment <= self.max_segment <= (self.seq_len - 1) // 2:
            raise ValueError(f"need 1 <= min_segment <= max_segment <= (seq_len - 1) // 2, got {self}")
        if self.steps < 1 or self.batch_size < 1 or self.d_model % self.num_heads:
            raise ValueError(f"need steps, batch_size >= 1 and num_heads dividing d_model, got {self}")


def build_tokenizer(max_length: int) -> PreTrainedTokenizerFast:
    """The word-level tokenizer (a transformers PreTrainedTokenizerFast) that puts <bos> in front of every text."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(VOCABULARY)}
    if len(vocab) != len(VOCABULARY):
        raise ValueError("VOCABULARY has a word twice")
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # runs of \w, or of punctuation
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, vocab[BOS])])
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, unk_token=UNK, model_max_length=max_length)


def build_model(recipe: Recipe) -> GPT2LMHeadModel:
    """A freshly initialised GPT2LMHeadModel (seeded; the global RNG is left alone), MLPs zeroed and frozen."""
    from transformers import AutoModelForCausalLM, GPT2Config

    config = GPT2Config(
        vocab_size=len(VOCABULARY),
        n_positions=recipe.seq_len,
        n_embd=recipe.d_model,
        n_layer=recipe.num_layers,
        n_head=recipe.num_heads,
        n_inner=1,  # the smallest MLP GPT-2 allows; zero and frozen below
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=False,
        bos_token_id=VOCABULARY.index(BOS),
        eos_token_id=None,
        pad_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(recipe.seed)
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    for block in model.transformer.h:
        for p in (*block.mlp.parameters(), *block.ln_2.parameters()):
            p.requires_grad_(False)
        with torch.no_grad():
            for p in block.mlp.parameters():
                p.zero_()
    return model


def sample_batch(recipe: Recipe, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """tokens (B, T): <bos>, random words, one segment copied later (see the module docstring);
    copied (B, T): True at the tokens x[b+1 .. b+s-1] of the copy, the ones its first word makes predictable."""
    B, L = recipe.batch_size, recipe.seq_len - 1
    words = torch.randint(FIRST_WORD_ID, len(VOCABULARY), (B, L), generator=generator)  # (B, L)
    copied = torch.zeros(B, L, dtype=torch.bool)  # (B, L)
    for row, predictable in zip(words, copied, strict=True):
        s = int(torch.randint(recipe.min_segment, recipe.max_segment + 1, (), generator=generator))
        a = int(torch.randint(0, L - 2 * s + 1, (), generator=generator))
        b = int(torch.randint(a + s, L - s + 1, (), generator=generator))
        row[b : b + s] = row[a : a + s]
        predictable[b + 1 : b + s] = True
    bos = torch.full((B, 1), VOCABULARY.index(BOS), dtype=words.dtype)  # (B, 1)
    return torch.cat([bos, words], dim=1), torch.cat([torch.zeros(B, 1, dtype=torch.bool), copied], dim=1)


def copy_loss(logits: Tensor, tokens: Tensor, copied: Tensor) -> Tensor:
    """mean over the (b, t) with copied[b, t+1] of -log softmax(logits[b, t])[tokens[b, t+1]].

    logits (B, T, V), tokens (B, T), copied (B, T).
    """
    targets = tokens[:, 1:].masked_fill(~copied[:, 1:], IGNORE)  # (B, T-1): the next token where it is predictable
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), targets.flatten(), ignore_index=IGNORE)


def train(recipe: Recipe = Recipe(), *, on_step: Callable[[int, float], None] | None = None) -> GPT2LMHeadModel:
    """Train the model of `recipe`; on_step(step, loss) after every step. Returns the GPT2LMHeadModel in eval mode."""
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        with torch_threads(recipe.threads):
            model = build_model(recipe).train()
            trainable = [p for p in model.parameters() if p.requires_grad]
            optimiser = torch.optim.Adam(trainable, lr=recipe.lr)
            generator = torch.Generator().manual_seed(recipe.seed)
            for step in range(1, recipe.steps + 1):
                tokens, copied = sample_batch(recipe, generator)  # (B, T), (B, T)
                loss = copy_loss(model(input_ids=tokens, use_cache=False).logits, tokens, copied)  # logits (B, T, V)
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                if on_step is not None:
                    on_step(step, loss.item())
    finally:
        torch.use_deterministic_algorithms(deterministic)
    return model.eval()


def save(model: GPT2LMHeadModel, recipe: Recipe, folder: Path) -> None:
    """config.json, generation_config.json, model.safetensors, tokenizer files and recipe.json into folder."""
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    build_tokenizer(recipe.seq_len).save_pretrained(folder)
    (folder / "recipe.json").write_text(json.dumps(asdict(recipe), indent=2) + "\n")


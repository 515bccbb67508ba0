"""A tiny GPT-2 style byte-level BPE tokenizer, trained offline on a few sentences (tokenizers' ByteLevel BPE, 40
merges: most CJK, Arabic and emoji characters stay split into bytes, some into a token of two bytes and one of the
third), and a tiny random GPT-2 that reads with it."""

from __future__ import annotations

from functools import cache

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from mha_viz.pretrained import PretrainedModel

CORPUS = ("the cat sat on the mat", "the red fox saw a big owl", "a cat and a fox", "你好 你好 世界 café café")
EOS = "<|endoftext|>"
TEXTS = {  # multi-byte text in several scripts, with spaces (GPT-2's "Ġ") between the words
    "chinese": "你好，世界 注意力机制 很有用",
    "japanese": "こんにちは、世界 カタカナ",
    "arabic": "مرحبا بالعالم",
    "emoji": "the cat 🐈 sat 👩‍👩‍👧 on 🇫🇷",
    "accents": "café déjà vu",
}


@cache
def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=256 + 1 + 40, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    backend.train_from_iterator(CORPUS, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS, bos_token=EOS)


def byte_level_model(seed: int = 0) -> PretrainedModel:
    """A random 2-layer GPT-2 (4 heads) reading with byte_level_tokenizer."""
    tokenizer = byte_level_tokenizer()
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=4, n_positions=128,
                        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id)
    model = GPT2LMHeadModel(config).eval()
    return PretrainedModel(model, tokenizer, name="tiny-byte-level")

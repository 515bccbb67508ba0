"""Tiny random causal language models with their LM heads, built offline from configs: GPT-2 and LLaMA with
grouped-query attention (4 query heads, 2 K/V heads) and attention biases. Every parameter is random, biases
and norm weights included, so no term of a logit attribution is zero by construction. They read text with the
bundled MiniLM tokenizer (vocabulary 30522; [SEP] = 102 is their end-of-sequence token)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, LlamaConfig, PretrainedConfig

from mha_viz.pretrained import PretrainedModel, bundled_model_dir

V = 30522
EOS = 102
CONFIGS = {
    "gpt2": lambda: GPT2Config(
        vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=101, eos_token_id=EOS
    ),
    "llama": lambda: LlamaConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64, max_position_embeddings=64, attention_bias=True, bos_token_id=101, eos_token_id=EOS,
    ),
}  # fmt: skip
NAMES = tuple(CONFIGS)


def build_lm(name: str, seed: int = 0) -> torch.nn.Module:
    """A seeded random causal LM: matrices ~ N(0, 0.2), vectors (biases, norm weights) their init + N(0, 0.1)."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(CONFIGS[name](), attn_implementation="eager")
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.2)
            else:
                p.add_(torch.randn_like(p) * 0.1)
    return model


def random_model(auto_class, config, seed: int = 0) -> torch.nn.Module:
    """A seeded random model of any family from its config (auto_class: AutoModel, AutoModelForCausalLM, ...),
    eager attention: matrices ~ N(0, 0.2), vectors (biases, norm weights) their init + N(0, 0.1) (drawn with randn,
    unlike build_lm's normal_)."""
    torch.manual_seed(seed)
    model = auto_class.from_config(config, attn_implementation="eager")
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.2 if p.dim() > 1 else p + torch.randn_like(p) * 0.1)
    return model


def random_causal_lm(config, seed: int = 0) -> torch.nn.Module:
    """random_model with its language-model head: a seeded random causal LM of any family."""
    return random_model(AutoModelForCausalLM, config, seed)


def tiny_causal(name: str, seed: int = 0) -> PretrainedModel:
    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    return PretrainedModel(build_lm(name, seed), tokenizer, name=f"tiny-{name}")


def saved_random_models(configs: Mapping[str, Callable[[], PretrainedConfig]], auto_class: type,
                        tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each config's random model (auto_class.from_config, seed 0, matrices ~ N(0, 0.2), vectors as initialised)
    saved with the bundled tokenizer in a temporary folder, as the app loads a model: {name: folder}."""
    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    out = {}
    for name, config in configs.items():
        torch.manual_seed(0)
        model = auto_class.from_config(config())
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() > 1:
                    p.normal_(0.0, 0.2)
        folder = tmp_path_factory.mktemp(name)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        out[name] = str(folder)
    return out

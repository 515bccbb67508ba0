"""CONTRIBUTING.md's "Add an architecture adapter", tried: a toy model family (GPT-2's blocks under a model_type of its
own, which transformers does not know) gets its adapter in one file (this one), registered with register(); its
tiny random model then goes through every test of tests/unit/test_families.py parametrised over FAMILIES, the
architectures the adapter registry must match, and the adapter is unregistered. (The README's list of adapted
architectures, which test_the_readme_lists_exactly_the_tested_architectures keeps, is the recipe's last step and
not tried here: a toy is no architecture to list.)"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence

import pytest
import transformers as tf
from torch import nn

from mha_viz.pretrained import PretrainedModel, bundled_model_dir
from mha_viz.pretrained.adapter import Adapter, Site, register, unregister
from mha_viz.pretrained.architectures import ADAPTERS, adapter_for
from mha_viz.pretrained.generic import GenericAdapter
from tests.tiny_causal import random_model
from tests.unit import test_families as families

TOY = "toy_gpt2"
pytestmark = pytest.mark.usefixtures("one_thread")


class ToyConfig(tf.GPT2Config):
    model_type = TOY


class ToyModel(tf.GPT2Model):
    config_class = ToyConfig


class ToyAuto:
    """What random_model needs of an Auto class: from_config, for the toy family transformers does not know."""

    @staticmethod
    def from_config(config: ToyConfig, **kwargs) -> ToyModel:
        return ToyModel._from_config(config, **kwargs)


class ToyAdapter(Adapter):
    """The recipe's one file: h[i].attn.c_attn (q, k, v side by side) and h[i].attn.c_proj."""

    architectures = (TOY,)
    kind = "decoder"

    def site(self, part: str, layer: int) -> Site:
        a = self.base.h[layer].attn
        return Site(a, a.c_attn, a.c_attn, a.c_attn, a.c_proj, a.num_heads, a.num_heads, a.head_dim)

    def pre_norm(self, part: str, layer: int) -> nn.Module:
        return self.base.h[layer].ln_1

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module]:
        return self.base.h, self.base.ln_f


def toy_config() -> ToyConfig:  # the recipe's FAMILIES entry: 2 layers, 4 heads, d_model 32, the MiniLM vocabulary
    return ToyConfig(vocab_size=families.V, n_embd=32, n_layer=2, n_head=4, n_positions=64, **families.TOKENS)


def parametrised_over_families(function: object) -> bool:
    return any(mark.name == "parametrize" and mark.args[0] == "name" and mark.args[1] is families.FAMILIES
               for mark in getattr(function, "pytestmark", []))


FAMILY_TESTS: list[Callable[..., None]] = [f for name, f in vars(families).items()
                                           if name.startswith("test_") and parametrised_over_families(f)]


@pytest.fixture
def toy(tokenizer: tf.PreTrainedTokenizerBase, monkeypatch: pytest.MonkeyPatch) -> Iterator[PretrainedModel]:
    register(ToyAdapter)
    try:
        monkeypatch.setitem(families.FAMILIES, TOY, ("Toy", toy_config))
        monkeypatch.setitem(families.QKV_LAYOUTS, TOY, "side by side")  # c_attn's split, restated from GPT-2's code
        yield PretrainedModel(random_model(ToyAuto, toy_config()), tokenizer, name="tiny-toy")
    finally:
        unregister(ToyAdapter)


@pytest.fixture(scope="module")
def tokenizer() -> tf.PreTrainedTokenizerBase:
    return tf.AutoTokenizer.from_pretrained(bundled_model_dir())


def test_the_family_tests_are_found() -> None:
    names = {f.__name__ for f in FAMILY_TESTS}
    assert {"test_traces_equal_the_model_in_every_layer_and_part", "test_projection_weights_are_the_models_own",
            "test_knockout_removes_exactly_the_heads_contribution"} <= names and len(names) >= 6


def test_without_its_adapter_the_toy_goes_the_generic_way_and_with_it_its_own(toy: PretrainedModel) -> None:
    assert type(toy.adapter) is ToyAdapter and ADAPTERS[TOY] is ToyAdapter
    unregister(ToyAdapter)
    assert TOY not in ADAPTERS and isinstance(adapter_for(toy.model), GenericAdapter)
    register(ToyAdapter)  # for the fixture's unregister


@pytest.mark.parametrize("check", FAMILY_TESTS, ids=lambda check: check.__name__)
def test_the_toy_family_passes_the_family_tests(toy: PretrainedModel, check: Callable[..., None]) -> None:
    traces = families.every_trace(toy)
    fixtures = {"models": {TOY: toy}, "traced": lambda name: traces, "name": TOY}
    check(**{arg: fixtures[arg] for arg in inspect.signature(check).parameters})


def test_the_registry_and_the_tested_families_agree_only_while_the_toy_is_in_both(toy: PretrainedModel) -> None:
    families.test_every_adapter_is_tested_here()
    del families.FAMILIES[TOY]  # registered but untested: the guard of the recipe's test step fails
    with pytest.raises(AssertionError):
        families.test_every_adapter_is_tested_here()

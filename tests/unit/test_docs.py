"""The examples in the docs run and print what they claim."""

import doctest

import pytest

import mha_viz
import mha_viz.pretrained


@pytest.mark.parametrize("module", [mha_viz, mha_viz.pretrained], ids=lambda m: m.__name__)
def test_package_docstring_examples(module) -> None:
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0

"""The examples in the docs run and print what they claim."""

import doctest

import mha_viz


def test_package_docstring_example() -> None:
    result = doctest.testmod(mha_viz)
    assert result.attempted > 0 and result.failed == 0

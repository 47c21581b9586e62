"""Whole numbers read from untrusted configs and headers: a bool, a float or a string is no size."""

import pytest

from core.whole import is_count, is_size


@pytest.mark.parametrize("value", [1, 7, 2**40])
def test_a_size_is_a_whole_number_of_at_least_one(value):
    assert is_size(value) and is_count(value)


@pytest.mark.parametrize("value", [0, -1, True, False, 1.0, "4", None, [4]])
def test_anything_else_is_no_size(value):
    assert not is_size(value)


def test_zero_is_a_count_but_a_bool_and_a_negative_are_not():
    assert is_count(0) and not is_count(False) and not is_count(-1) and not is_count(2.0)

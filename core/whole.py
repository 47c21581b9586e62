"""Numbers read from configs, file headers and arguments, which may hold anything: a bool is no number."""

from __future__ import annotations


def is_count(value) -> bool:
    """Whether ``value`` is a whole number of at least 0 (an int, not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_size(value) -> bool:
    """Whether ``value`` is a size: a whole number of at least 1 (an int, not a bool)."""
    return is_count(value) and value > 0


def is_probability(value) -> bool:
    """Whether ``value`` is a number from 0 to 1 (an int or float, not a bool; NaN is not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daccore.units import bricks_needed, format_size, parse_size


@pytest.mark.parametrize(
    "text,expected",
    [
        ("1", 1),
        ("0", 0),
        (4096, 4096),
        ("1K", 1024),
        ("1KiB", 1024),
        ("1KB", 1000),
        ("2TiB", 2 * 1024**4),
        ("2TB", 2 * 10**12),
        ("1.5GiB", 3 * 1024**3 // 2),
        ("1.1GB", 1_100_000_000),
        ("0.0001K", 1),
        ("1 MiB", 1024**2),
        ("3mib", 3 * 1024**2),
        ("1P", 1024**5),
        ("1PB", 10**15),
        ("10B", 10),
        ("1Gi", 1024**3),
    ],
)
def test_parse_size_understands_binary_and_decimal_units(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "1XB", "-1", "1e3", "1..5G", "abc", "1 2"])
def test_parse_size_refuses_non_sizes_with_the_text_in_the_message(text):
    with pytest.raises(ValueError, match=repr(text).strip('"') if text else "''"):
        parse_size(text)


def test_parse_size_refuses_negative_ints_and_bools():
    with pytest.raises(ValueError):
        parse_size(-5)
    with pytest.raises(ValueError):
        parse_size(True)


@given(st.integers(min_value=0, max_value=2**60))
def test_format_then_parse_is_close(n):
    back = parse_size(format_size(n))
    assert abs(back - n) <= max(n * 0.05, 0)


def test_format_size_is_short():
    assert format_size(1024**3) == "1GiB"
    assert format_size(3 * 1024**3 // 2) == "1.5GiB"
    assert format_size(512) == "512B"


@given(st.integers(1, 10**15), st.integers(1, 10**12))
def test_bricks_needed_rounds_up(capacity, granularity):
    n = bricks_needed(capacity, granularity)
    assert n * granularity >= capacity > (n - 1) * granularity

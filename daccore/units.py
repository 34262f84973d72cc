"""Sizes as people write them: K/KiB/M/MiB/G/GiB/T/TiB/P/PiB are powers of 1024,
KB/MB/GB/TB/PB powers of 1000 (the DataWarp and Slurm convention), decimals allowed,
a bare number is bytes."""

from __future__ import annotations

import math
import re

_BINARY = {"k": 1, "ki": 1, "m": 2, "mi": 2, "g": 3, "gi": 3, "t": 4, "ti": 4, "p": 5, "pi": 5}
_DECIMAL = {"kb": 1, "mb": 2, "gb": 3, "tb": 4, "pb": 5}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Bytes in `text`; raises ValueError naming the text when it is not a size.

    Fractions of a byte round up, so "1.5K" is 1536 and "0.0001K" is 1.
    """
    if isinstance(text, bool):
        raise ValueError(f"'{text}' is not a size")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"'{text}' must not be negative")
        return text
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(f"'{text}' is not a size like 1TiB, 500GB or 1048576")
    number, unit = m.group(1), m.group(2).lower()
    if unit in ("", "b"):
        scale = 1
    elif unit in _BINARY:
        scale = 1024 ** _BINARY[unit]
    elif unit.endswith("ib") and unit[:-1] in _BINARY:
        scale = 1024 ** _BINARY[unit[:-1]]
    elif unit in _DECIMAL:
        scale = 1000 ** _DECIMAL[unit]
    else:
        raise ValueError(f"'{text}' has an unknown unit '{m.group(2)}'")
    if "." in number:
        # Exact decimal arithmetic: float would turn 1.1GB into 1100000000.0000002.
        whole, frac = number.split(".")
        num = int(whole or "0") * 10 ** len(frac) + int(frac)
        return -(-num * scale // 10 ** len(frac))
    return int(number) * scale


_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]


def format_size(n: int) -> str:
    """Short binary form: 1073741824 -> '1GiB', 1610612736 -> '1.5GiB'."""
    if n < 1024:
        return f"{n}B"
    exp = min(int(math.log(n, 1024)), len(_UNITS) - 1)
    value = n / 1024**exp
    text = f"{value:.1f}".removesuffix(".0") if value < 100 else f"{value:.0f}"
    return f"{text}{_UNITS[exp]}"


def format_duration(seconds: float) -> str:
    """Short: 42 -> '42s', 185 -> '3m05s', 7260 -> '2h01m'."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s // 60 % 60:02d}m"


def bricks_needed(capacity: int, granularity: int) -> int:
    """How many bricks of `granularity` bytes hold `capacity` bytes (rounded up)."""
    return -(-capacity // granularity)

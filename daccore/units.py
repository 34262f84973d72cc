"""Sizes as people write them: K/KiB/M/MiB/G/GiB/T/TiB/P/PiB are powers of 1024,
KB/MB/GB/TB/PB powers of 1000 (the DataWarp and Slurm convention), a bare number is bytes.

Two readers: `parse_size` for dac's own settings and commands (decimals allowed, `1.5GiB`),
and `parse_capacity` for sizes in a job script, which Slurm reads too and must read the same
(see its docstring). ASCII digits only in both: `int()` and `\\d` accept any Unicode digit
(`１０GiB`), which Slurm's strtoull does not."""

from __future__ import annotations

import math
import re

_BINARY = {"k": 1, "ki": 1, "m": 2, "mi": 2, "g": 3, "gi": 3, "t": 4, "ti": 4, "p": 5, "pi": 5}
_DECIMAL = {"kb": 1, "mb": 2, "gb": 3, "tb": 4, "pb": 5}
_SIZE = re.compile(r"^[ \t]*([0-9]+(?:\.[0-9]+)?|\.[0-9]+)[ \t]*([A-Za-z]*)[ \t]*$")
#: Slurm's suffix_mult (src/common/slurm_protocol_defs.c, unchanged 22.05 to 26.05), plus "b",
#: which it does not know and so reads as bytes, as dac does
_SLURM_UNITS: dict[str, int] = {  # int ** int is Any to mypy (a negative power is a float)
    "": 1,
    "b": 1,
    **{u: 1024**e for e, p in enumerate("kmgtp", 1) for u in (p, p + "ib")},
    **{p + "b": 1000**e for e, p in enumerate("kmgtp", 1)},
}
_CAPACITY = re.compile(r"^([0-9]+)([A-Za-z]*)$")
#: Slurm keeps its job sizes in a uint64 whose top bit marks a count of nodes and multiplies
#: without an overflow check; 1 EiB leaves room for its rounding up to a pool's granularity.
MAX_CAPACITY = 1 << 60


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
        ten_to: int = 10 ** len(frac)  # typed: int ** int is Any to mypy
        num = int(whole or "0") * ten_to + int(frac)
        return -(-num * scale // ten_to)
    return int(number) * scale


def parse_capacity(text: str) -> int:
    """Bytes in a job script's size (`capacity=`, `#DW swap`), read exactly as Slurm reads it;
    ValueError with the reason (to follow "capacity '<text>' ") for anything Slurm would read
    differently from what the user meant.

    Slurm's burst buffer plugins parse `capacity=` themselves (bb_get_size_num in
    src/plugins/burst_buffer/common/burst_buffer_common.c, the same from 22.05 to 26.05):
    strtoull of the leading digits, then the rest up to a space through suffix_mult; a suffix
    it does not know is ignored, so `1.5GiB` is 1 byte and `1Gi` is 1 byte, and `10N` is a
    count of nodes. dac accepts only `<ASCII digits><suffix Slurm knows>` and refuses the rest
    here, at submission, in one line, rather than allocate a size Slurm does not account.
    """
    m = _CAPACITY.match(text)
    if m and m.group(2).lower() in _SLURM_UNITS:
        value = int(m.group(1)) * _SLURM_UNITS[m.group(2).lower()]
        if value > MAX_CAPACITY:
            raise ValueError(f"is more than {format_size(MAX_CAPACITY)}, the most dac accepts")
        return value
    if not text.isascii():
        raise ValueError("must be written in ASCII digits and letters, as in 10GiB")
    frac = re.match(r"^([0-9]*)\.[0-9]+([A-Za-z]*)$", text)
    if frac and frac.group(2).lower() in _SLURM_UNITS:
        whole = int(frac.group(1) or "0")
        decimal = len(frac.group(2)) == 2 and frac.group(2).lower().endswith("b")
        raise ValueError(
            f"has a fraction, which Slurm reads as {whole} "
            f"byte{'' if whole == 1 else 's'}: write "
            f"{_whole_units(parse_size(text), decimal)}"
        )
    if m and m.group(2).lower() in ("n", "node", "nodes"):
        raise ValueError(
            "is a count of nodes, which dac does not allocate by: give a size, as in 10GiB"
        )
    if m:
        n = int(m.group(1))
        raise ValueError(
            f"has a unit Slurm does not know, so Slurm would read it as "
            f"{n} byte{'' if n == 1 else 's'}: use K, M, G, T, P with iB "
            "(powers of 1024) or B (powers of 1000), as in 10GiB or 500GB"
        )
    raise ValueError("is not a size like 1TiB, 500GB or 1048576")


def _whole_units(n: int, decimal: bool) -> str:
    """n in the largest unit of its kind that holds it whole: 1610612736 -> '1536MiB'."""
    units = (
        [("PB", 1000**5), ("TB", 1000**4), ("GB", 1000**3), ("MB", 1000**2), ("KB", 1000)]
        if decimal
        else [(u, parse_size("1" + u)) for u in reversed(_UNITS[1:])]
    )
    return next((f"{n // size}{u}" for u, size in units if n % size == 0), str(n))


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

"""A job script's sizes mean the same to dac and to Slurm, or dac refuses them."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daccore.rules.directives import DirectiveError, parse_script
from daccore.units import MAX_CAPACITY, parse_capacity, parse_size

_MULT = {
    b"k": 1024,
    b"kib": 1024,
    b"kb": 1000,
    b"m": 1024**2,
    b"mib": 1024**2,
    b"mb": 1000**2,
    b"g": 1024**3,
    b"gib": 1024**3,
    b"gb": 1000**3,
    b"t": 1024**4,
    b"tib": 1024**4,
    b"tb": 1000**4,
    b"p": 1024**5,
    b"pib": 1024**5,
    b"pb": 1000**5,
}
_NODES = 1 << 63


def slurm_size(tok: bytes) -> int:
    """Slurm's bb_get_size_num(tok, 1) (burst_buffer_common.c, 22.05 to 26.05) in Python:
    strtoull in the C locale, then the rest up to a space through suffix_mult, an unknown
    suffix ignored, uint64 arithmetic."""
    i = 0
    while i < len(tok) and tok[i] in b" \t\n\v\f\r":
        i += 1
    neg = tok[i : i + 1] == b"-"
    if tok[i : i + 1] in (b"+", b"-"):
        i += 1
    j = i
    while j < len(tok) and tok[j] in b"0123456789":
        j += 1
    if j == i or int(tok[i:j]) >= 1 << 64:
        return 0
    value = (-int(tok[i:j]) if neg else int(tok[i:j])) % (1 << 64)
    if value == 0:
        return 0
    rest = tok[j:]
    if rest and rest[:1] not in b" \t\n\v\f\r":
        unit = rest.split(b" ")[0].lower()
        if unit in (b"n", b"node", b"nodes"):
            return value | _NODES
        value = value * _MULT.get(unit, 1) % (1 << 64)
    return value


def slurm_line(line: bytes) -> int:
    """What burst_buffer/lua's _parse_bb_opts takes from one directive line: the first
    `capacity=` anywhere on it."""
    at = line.find(b"capacity=")
    return slurm_size(line[at + 9 :]) if at >= 0 else 0


@pytest.mark.parametrize(
    "text,expected",
    [
        ("1", 1),
        ("100B", 100),
        ("1K", 1024),
        ("1kib", 1024),
        ("1KB", 1000),
        ("3mib", 3 * 1024**2),
        ("2TiB", 2 * 1024**4),
        ("2TB", 2 * 10**12),
        ("1P", 1024**5),
        ("1PB", 10**15),
        ("010GiB", 10 * 1024**3),
        ("1024PiB", MAX_CAPACITY),
    ],
)
def test_parse_capacity_reads_what_slurm_reads(text, expected):
    assert parse_capacity(text) == expected == slurm_size(text.encode())


@pytest.mark.parametrize(
    "text,reason",
    [
        ("1.5GiB", "has a fraction, which Slurm reads as 1 byte: write 1536MiB"),
        ("1.1GB", "has a fraction, which Slurm reads as 1 byte: write 1100MB"),
        (".5GiB", "Slurm reads as 0 bytes: write 512MiB"),
        ("\uff11\uff10GiB", "must be written in ASCII digits"),  # full-width 10
        ("\u0661\u0660GiB", "must be written in ASCII digits"),  # Arabic-Indic 10
        ("1Gi", "Slurm would read it as 1 byte"),
        ("10XB", "Slurm would read it as 10 bytes"),
        ("4N", "a count of nodes"),
        ("2nodes", "a count of nodes"),
        ("16384PiB", "more than 1024PiB"),
        ("18446744073709551617", "more than 1024PiB"),
        ("-1GiB", "not a size"),
        ("+1GiB", "not a size"),
        ("1e9", "not a size"),
        ("", "not a size"),
    ],
)
def test_parse_capacity_refuses_what_slurm_would_misread(text, reason):
    with pytest.raises(ValueError, match=reason.replace(".", r"\.")):
        parse_capacity(text)


def test_parse_size_for_dac_settings_takes_ascii_digits_only():
    assert parse_size("1.5GiB") == 3 * 1024**3 // 2  # dac's own settings keep decimals
    for text in ("\uff11\uff10GiB", "\u0661GiB", "1\u00a0GiB", "\uff11"):
        with pytest.raises(ValueError):
            parse_size(text)


@given(st.text(alphabet="0123456789.+- kKmMgGtTpPiIbBnNoOdDeEsSxX\uff11\u0660\u00a0", max_size=12))
def test_every_capacity_dac_accepts_slurm_reads_the_same(text):
    try:
        ours = parse_capacity(text)
    except ValueError:
        return
    assert 0 < ours <= MAX_CAPACITY or ours == 0
    assert slurm_size(text.encode()) == ours


@given(st.text(alphabet="0123456789.kKgGiIbBnN \u00a0\u2003\x85=poolx\uff11", max_size=14))
def test_every_jobdw_line_dac_accepts_slurm_sizes_the_same(value):
    line = f"#BB capacity={value} pool=p"
    try:
        d = parse_script(f"#!/bin/sh\n{line}\n", "BB")
    except DirectiveError:
        return
    assert d.jobdw is not None
    assert slurm_line(line.encode()[3:]) == d.jobdw.capacity


@pytest.mark.parametrize(
    "line,reason",
    [
        ("#BB capacity=1.5GiB pool=p", "line 2: jobdw: capacity '1.5GiB' has a fraction"),
        (
            "#DW jobdw capacity=\uff11\uff10GiB",
            "capacity '\uff11\uff10GiB' must be written in ASCII",
        ),
        ("#BB capacity=1GiB\u00a0pool=p", "line 2: jobdw: contains the space U+00A0"),
        ("#DW jobdw capacity=10N", "a count of nodes"),
        ("#BB create_persistent name=p1 capacity=2.5TB", "write 2500GB"),
    ],
)
def test_job_script_sizes_slurm_would_misread_are_refused_in_one_line(line, reason):
    with pytest.raises(DirectiveError, match=re.escape(reason)) as e:
        parse_script(f"#!/bin/sh\n{line}\n", "BB")
    assert "\n" not in str(e.value)


def test_swap_and_stage_paths_cannot_smuggle_a_size_past_slurm():
    with pytest.raises(DirectiveError, match="line 3: swap: size '1.5GiB' must be whole"):
        parse_script("#!/bin/sh\n#DW jobdw capacity=1GiB\n#DW swap 1.5GiB\n")
    with pytest.raises(DirectiveError, match="line 3: stage_in: a path contains 'capacity='"):
        parse_script(
            "#!/bin/sh\n#DW jobdw capacity=1GiB\n#DW stage_in type=file "
            "source=/d/capacity=9PiB destination=$DW_JOB_STRIPED/x\n"
        )

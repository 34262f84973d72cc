"""Which lines of a job script are directives: every line Slurm hands its burst-buffer plugin as
one is a line dac reads (and bounds, and refuses if bad), or dac refuses the script (issue 45).

Slurm finds them in `_xlate_batch` (burst_buffer_datawarp.c, burst_buffer_lua.c; the same code
in 22.05, 24.11 and 26.05) and reads them in `_parse_bb_opts` and `_get_bb_job`; `slurm_lines`
below is that code in Python. Three ways it read directives dac did not: an empty line, which
ended dac's block and which Slurm's strtok_r skips; a `\\` at the end of a comment line, which
made dac join the next line to it and Slurm does not; and a prefix with no space after it,
which Slurm matches as a string and dac did not."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daccore.records.bounds import MAX_CREATE_LINES, MAX_SCRIPT_HEAD, MAX_SCRIPT_HEAD_LINES
from daccore.rules import directives
from daccore.rules.directives import DirectiveError, head_read, parse_script

C_SPACE = b" \t\n\v\f\r"  # C's isspace()


def slurm_lines(script: bytes, plugin: str, directive: bytes = b"BB_LUA"):
    """The directive lines Slurm reads in `script`, as (first line, text after the prefix and
    the spaces after it), or None where Slurm refuses the script. `_xlate_batch`: the script
    split at '\\n' by strtok_r (empty lines skipped), up to the first line not starting with
    '#'; a directive line (datawarp: starting with `#BB` or `#DW`; lua: with `#<Directive>`)
    ending in `\\` goes on in the next directive line without its prefix (and without the
    spaces after it when a space came before the `\\`); any other line ends it; datawarp
    refuses a `#BB` line going on in a `#DW` one. `_parse_bb_opts`, `_get_bb_job`: each line's
    text starts after its prefix and the spaces after it."""
    if plugin == "datawarp":
        skip = 3

        def kind(tok: bytes):
            return tok[1:3] if tok[1:3] in (b"BB", b"DW") else None
    else:
        skip = 1 + len(directive)

        def kind(tok: bytes):
            return directive if tok[1:skip] == directive else None

    found: list[list[bytes]] = []  # [first line, the line as joined]
    going_on = space = False
    last = None
    for tok in script.split(b"\n"):
        if not tok:  # strtok_r
            continue
        if tok[:1] != b"#":
            break
        this = kind(tok)
        if this is None:
            going_on = False
            continue
        at = 0
        if going_on:
            if this != last:  # datawarp's "Mixing #DW with #BB on same (continued) line"
                return None
            at = skip
            while space and tok[at : at + 1] and tok[at : at + 1] in C_SPACE:
                at += 1
        else:
            found.append([tok, b""])
        last, piece = this, tok[at:]
        going_on = piece.endswith(b"\\")
        if going_on:
            space, piece = tok[-2:-1] in C_SPACE, piece[:-1]  # isspace(tok[len - 2])
        found[-1][1] += piece
    return [(first, joined[skip:].lstrip(C_SPACE)) for first, joined in found]


def dac_lines(script: bytes, lua_directive: str):
    """The directive lines dac reads in `script`, as slurm_lines gives them, or None where dac
    refuses the script before it reads one."""
    head = directives._head(script).decode("utf-8", "surrogateescape")
    try:
        found = list(directives._directive_lines(head, *directives._prefixes(lua_directive)))
    except DirectiveError:
        return None
    lines = script.split(b"\n")
    return [(lines[n - 1], text.encode("utf-8", "surrogateescape")) for n, text in found]


def creates(n: int) -> str:
    return "".join(f"#BB create_persistent name=c{i} capacity=1GiB\n" for i in range(n))


def test_an_empty_line_does_not_end_the_block_where_directives_are_read():
    """Bypass 1: dac stopped at the empty line; Slurm's strtok_r skips it, and under
    burst_buffer/datawarp started every create_persistent after it."""
    script = "#!/bin/sh\n\n#BB create_persistent name=c0 capacity=1GiB\nsrun x\n"
    assert [(c.line, c.name) for c in parse_script(script).create] == [(3, "c0")]
    with pytest.raises(DirectiveError) as e:
        parse_script("#!/bin/sh\n\n" + creates(50) + "srun x\n")
    assert str(e.value) == (
        f"line {MAX_CREATE_LINES + 3}: create_persistent: more than {MAX_CREATE_LINES} "
        "create_persistent lines: create the others from another job"
    )
    # leading empty lines too (sbatch refuses a script not starting with #!, slurmctld does not)
    assert parse_script("\n\n#DW jobdw capacity=1GiB\nsrun x\n").jobdw.line == 3  # type: ignore[union-attr]


def test_a_backslash_ending_a_comment_line_joins_nothing_to_it():
    """Bypass 2: dac joined the next line to `#SBATCH … \\` and so never read it as a directive;
    Slurm ends a continuation at any line that is not a directive, so the next is one."""
    script = "#!/bin/sh\n#SBATCH --comment=x \\\n#BB create_persistent name=c0 capacity=1GiB\n"
    assert [(c.line, c.name) for c in parse_script(script + "srun x\n").create] == [(3, "c0")]
    with pytest.raises(DirectiveError, match=f"^line {MAX_CREATE_LINES + 3}: create_persistent: "):
        parse_script("#!/bin/sh\n#SBATCH --comment=x \\\n" + creates(50) + "srun x\n")
    # and a directive going on in a line Slurm does not join to it is refused, not joined
    with pytest.raises(DirectiveError) as e:
        parse_script("#!/bin/sh\n#DW jobdw \\\n#   capacity=1GiB\nsrun x\n")
    assert str(e.value) == (
        "line 2: jobdw: ends in '\\' but line 3 (the next not empty) does not start with '#DW ', "
        "so Slurm would not join them: continue on a '#DW ' line or drop the '\\'"
    )


def test_a_prefix_with_no_space_after_it_is_refused():
    """Bypass 3: Slurm matches a prefix as a string: burst_buffer/datawarp took
    `#BBcreate_persistent …` for a create_persistent, dac for a comment."""
    with pytest.raises(DirectiveError) as e:
        parse_script("#!/bin/sh\n#BBcreate_persistent name=c0 capacity=1GiB\nsrun x\n")
    assert str(e.value) == (
        "line 2: #BBcreate_persistent: put a space after #BB (Slurm reads a line starting with "
        "#BB as a directive)"
    )
    # burst_buffer/lua reads any line starting with its Directive; datawarp a #DW or #BB line
    # by the word it starts with, a lowercase one
    for line, lua in [
        ("#DWjobdw capacity=1GiB", "BB_LUA"),
        ("#BB_LUAcapacity=1GiB pool=p", "BB_LUA"),
        ("#BB_LUA capacity=1GiB pool=p", "BB"),  # lua: `_LUA capacity=…`, 1 GiB of pool p
        ("#SITE-x capacity=1GiB pool=p", "SITE"),
    ]:
        with pytest.raises(DirectiveError, match=r"^line 2: #\S+: put a space after #"):
            parse_script(f"#!/bin/sh\n{line}\n", lua)
    # what neither plugin reads as one is a comment: datawarp ignores `#BB_LUA …` (its word is
    # `_LUA`) and `#DWARF` (`ARF`), lua a line not starting with its Directive
    for line in ("#BB_LUA create_persistent name=c0 capacity=1GiB", "#DWARF", "#BB-1 x"):
        assert parse_script(f"#!/bin/sh\n{line}\n", "X").empty
    # a space C's isspace() knows is a space there, as Slurm skips it; another is not
    assert parse_script("#!/bin/sh\n#DW\tjobdw capacity=1GiB\n").jobdw is not None
    with pytest.raises(DirectiveError, match="^line 2: #DW…: put a space after #DW "):
        parse_script("#!/bin/sh\n#DW\u00a0jobdw capacity=1GiB\n", "DW")
    with pytest.raises(DirectiveError, match="^line 2: directive: contains the space U"):
        parse_script("#!/bin/sh\n#DW \u00a0\n")  # Slurm skips the first space only


def test_continuations_join_as_slurm_joins_them():
    """Without the `\\`; the next line without its prefix, and without its spaces when a space
    came before the `\\`; across empty lines, which strtok_r skips."""
    d = parse_script(
        "#!/bin/sh\n#DW jobdw\\\n#DW capacity=1GiB \\\n\n#DW    access_mode=private\nsrun x\n"
    )
    assert (d.jobdw.line, d.jobdw.capacity, d.jobdw.access) == (2, 1 << 30, "private")  # type: ignore[union-attr]
    assert slurm_lines(
        b"#!/bin/sh\n#DW jobdw\\\n#DW capacity=1GiB \\\n\n#DW    access_mode=private\n", "datawarp"
    ) == [(b"#DW jobdw\\", b"jobdw capacity=1GiB access_mode=private")]
    with pytest.raises(DirectiveError, match="^line 2: jobdw: ends in '.' but line 3 .*'#DW '"):
        parse_script("#!/bin/sh\n#DW jobdw \\\n#BB capacity=1GiB\n")  # datawarp refuses it
    with pytest.raises(DirectiveError, match="^line 3: jobdw: ends in '.' but no '#DW ' line"):
        parse_script("#!/bin/sh\n#DW jobdw \\\n#DW capacity=1GiB \\\nsrun x\n")


def test_a_carriage_return_is_a_character_of_its_line_as_in_slurm():
    """strtok_r splits at '\\n' alone: a '\\r' line ends the block, and a '\\r' ending a
    directive is in its text (Slurm reads `capacity=1GiB\\r` as 1 byte), so it is refused."""
    assert parse_script("#!/bin/sh\n\r\n#DW jobdw capacity=1GiB\n").empty
    with pytest.raises(DirectiveError, match="^line 2: jobdw: contains a control character"):
        parse_script("#!/bin/sh\r\n#DW jobdw capacity=1GiB\r\nsrun x\r\n")
    with pytest.raises(DirectiveError, match="^line 2: jobdw: contains a backslash"):
        parse_script("#!/bin/sh\n#DW jobdw \\\r\n#DW capacity=1GiB\n")  # no continuation


def test_a_line_starting_with_a_space_ends_the_block():
    assert parse_script("#!/bin/sh\n #DW jobdw capacity=1GiB\n#DW jobdw capacity=bogus\n").empty


# Scripts made of pieces that meet at every edge the rules above have.
_START = ["#DW", "#BB", "#BB_LUA", "#X", "#", "#SBATCH", "#!/bin/sh", "", " #DW", "\r", "echo"]
_AFTER = ["", " ", "  ", "\t", "\r", "\x1c", "\u00a0", "x", "_LUA"]
_WORDS = ["jobdw", "capacity=1GiB", "create_persistent name=c capacity=1", "x", "", " y", "GiB"]
_END = ["", " \\", "\\", "\\\r", "\r", " ", "\\\\"]
script_lines = st.builds(
    lambda *parts: "".join(parts),
    st.sampled_from(_START),
    st.sampled_from(_AFTER),
    st.sampled_from(_WORDS),
    st.sampled_from(_END),
)
scripts = st.builds(
    lambda lines: "\n".join(lines).encode("utf-8", "surrogateescape"),
    st.lists(st.one_of(script_lines, script_lines, st.just("")), max_size=10),
)


@settings(max_examples=1500, deadline=None)
@given(scripts, st.sampled_from(["BB_LUA", "X"]))
def test_under_datawarp_dac_reads_every_directive_slurm_does(script, lua_directive):
    """Unless dac refuses the script, it reads every line burst_buffer/datawarp acts on, with
    the same text. Datawarp acts on a line by the word its text starts with, every one
    lowercase (`_parse_bb_opts`, `_get_bb_job`); the lines starting with the lua prefix are
    dac's alone: to datawarp a `#BB_LUA` line is a #BB line of `_LUA …`, which it ignores."""
    ours = dac_lines(script, lua_directive)
    if ours is None:
        return
    theirs = slurm_lines(script, "datawarp")
    if theirs is None:  # Slurm refuses it itself (a #DW line going on in a #BB one)
        return
    lua = b"#" + lua_directive.encode()
    assert all(text.startswith(b"_LUA") for first, text in theirs if first.startswith(lua))
    acted = [x for x in theirs if not x[0].startswith(lua) and x[1][:1].islower()]
    left = iter(ours)  # dac may read more: a #BB line after a comment `#BB_x \`, say
    assert all(x in left for x in acted), (acted, ours)


@settings(max_examples=1500, deadline=None)
@given(scripts, st.sampled_from(["BB_LUA", "BB", "DW", "X", "B", "D"]))
def test_under_lua_dac_reads_every_directive_slurm_does(script, lua_directive):
    """Unless dac refuses the script, its `#<Directive>` lines are burst_buffer/lua's, with the
    same text (the #DW and #BB lines it also reads are dac's alone)."""
    ours = dac_lines(script, lua_directive)
    if ours is None:
        return
    lua = b"#" + lua_directive.encode()
    assert [x for x in ours if x[0].startswith(lua)] == slurm_lines(script, "lua", lua[1:])


@settings(max_examples=500, deadline=None)
@given(scripts, st.integers(1, 9))
def test_head_read_stops_where_parse_script_stops(script, chunk):
    """dacctl reads a script in chunks until head_read says a parse reads no further: a parse
    of what it read is the parse of the whole script."""
    body = script + b"\nsrun x\n" + b"#DW jobdw capacity=bogus\n" * 3
    data = b""
    while len(data) < len(body):
        new = len(data)
        data += body[new : new + chunk]
        if head_read(data, new):
            break
    assert _outcome(data) == _outcome(body)


JOBDW = b"#!/bin/sh\n#DW jobdw capacity=1GiB\n"
BODY = b"srun x\n" + b"echo body\n" * 200_000


@pytest.mark.parametrize(
    "script",
    [
        JOBDW + b"\n" * (MAX_SCRIPT_HEAD_LINES - 2) + BODY,  # empty lines: at the line bound
        JOBDW + b"\n" * (MAX_SCRIPT_HEAD_LINES - 1) + BODY,  # one past it
        JOBDW + b"\n" * (2 * MAX_SCRIPT_HEAD) + BODY,  # 2 MiB of them
        JOBDW + b"#\n" * (MAX_SCRIPT_HEAD_LINES - 2) + b"#" * 90_000 + b"\n" + BODY,
        JOBDW + b"#" + b"x" * (MAX_SCRIPT_HEAD - len(JOBDW) - 1) + b"\n" + BODY,  # 1 MiB block
        JOBDW + b"#" + b"x" * (MAX_SCRIPT_HEAD - len(JOBDW)) + b"\n" + BODY,  # a byte more
        JOBDW + b"#" + b"x" * (MAX_SCRIPT_HEAD - len(JOBDW) - 1),  # no body
        JOBDW + b"#" + b"x" * (MAX_SCRIPT_HEAD - len(JOBDW)),
    ],
)
@pytest.mark.parametrize("chunk", [64 << 10, 65_537, MAX_SCRIPT_HEAD + 1])
def test_head_read_stops_where_parse_script_stops_at_the_bounds(script, chunk):
    """As test_head_read_stops_where_parse_script_stops, at the block's bounds, where the parse
    looks for its end no further than a block within them ends."""
    data = b""
    while len(data) < len(script):
        new = len(data)
        data += script[new : new + chunk]
        if head_read(data, new):
            break
    assert _outcome(data) == _outcome(script)


def test_a_long_block_of_empty_lines_is_refused_in_bounded_time():
    """Its end was looked for through all of it: 7 ms for 1 MiB of empty lines."""
    import time

    script = JOBDW + b"\n" * (4 * MAX_SCRIPT_HEAD) + b"#DW jobdw capacity=1GiB\nsrun x\n"
    start = time.monotonic()
    with pytest.raises(DirectiveError, match=f"^line {MAX_SCRIPT_HEAD_LINES + 1}: script: "):
        parse_script(script)
    assert time.monotonic() - start < 0.05


def _outcome(script: bytes):
    try:
        d = parse_script(script)
    except DirectiveError as e:
        return str(e)
    return [getattr(d, name) for name in d.__slots__]

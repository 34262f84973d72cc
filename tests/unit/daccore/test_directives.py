import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daccore.rules.directives import DirectiveError, Directives, JobDW, parse_script

GiB = 1024**3


def jobdw(d: Directives) -> JobDW:
    """The script's jobdw line (every script here that reads it has one)."""
    assert d.jobdw is not None
    return d.jobdw


def script(*lines, shebang=True):
    return ("#!/bin/bash\n" if shebang else "") + "\n".join(lines) + "\necho body\n"


def test_a_typical_datawarp_script():
    d = parse_script(
        script(
            "#SBATCH -N 2",
            "#DW jobdw capacity=2TiB access_mode=striped type=scratch",
            "#DW stage_in type=directory source=/home/alice/in destination=$DW_JOB_STRIPED/in",
            "#DW stage_out type=directory source=$DW_JOB_STRIPED/out destination=/home/alice/out",
            "#DW persistentdw name=shared1",
            "#DW swap 4GiB",
        )
    )
    assert jobdw(d).capacity == 2 * 1024**4 and jobdw(d).access == "striped" and jobdw(d).line == 3
    assert [(s.type, s.source, s.destination) for s in d.stage_in] == [
        ("directory", "/home/alice/in", "$DW_JOB_STRIPED/in")
    ]
    assert d.stage_out[0].destination == "/home/alice/out"
    assert d.persistent == ["shared1"] and d.swap == 4 * GiB


def test_every_prefix_carries_every_directive():
    for prefix in ("#DW", "#BB", "#BB_LUA"):
        assert jobdw(parse_script(script(f"{prefix} jobdw capacity=1GiB"))).capacity == GiB
    assert parse_script(script("#SITE jobdw capacity=1GiB"), lua_directive="SITE").jobdw
    # burst_buffer/datawarp reads it as a #BB line of `_LUA jobdw …`, and ignores it, as
    # burst_buffer/lua does when its Directive is another (test_directive_lines.py)
    assert parse_script(script("#BB_LUA jobdw capacity=1GiB"), lua_directive="X").empty


def test_bare_key_values_are_a_jobdw_as_sbatch_bb_writes_them():
    d = parse_script(script("#BB capacity=3GiB access=striped,private type=scratch pool=fast"))
    assert (jobdw(d).capacity, jobdw(d).access, jobdw(d).pool) == (
        3 * GiB,
        "striped,private",
        "fast",
    )


def test_persistent_buffers_are_created_and_destroyed():
    d = parse_script(
        script(
            "#BB create_persistent name=proj.a capacity=10GiB access=striped type=scratch",
            "#BB destroy_persistent name=old-1 hurry",
        )
    )
    assert (d.create[0].name, d.create[0].capacity) == ("proj.a", 10 * GiB)
    assert (d.destroy[0].name, d.destroy[0].hurry) == ("old-1", True)


def test_a_key_given_twice_with_the_same_value_counts_once():
    """Slurm's own tests (test35.2, 35.3, 35.6) write `type=scratch` twice on the jobdw line."""
    d = parse_script(
        script("#DW jobdw type=scratch capacity=1GiB access_mode=striped,private type=scratch")
    )
    assert (jobdw(d).capacity, jobdw(d).access, jobdw(d).type) == (
        GiB,
        "striped,private",
        "scratch",
    )
    with pytest.raises(DirectiveError, match="^line 2: jobdw: type is given twice$"):
        parse_script(script("#DW jobdw type=scratch capacity=1GiB type=cache"))
    with pytest.raises(DirectiveError, match="^line 2: jobdw: capacity is given twice$"):
        parse_script(script("#DW jobdw capacity=1GiB capacity=1024MiB"))  # same size, not text


def test_a_list_stage_in_may_leave_each_destination_to_the_list():
    d = parse_script(
        script("#DW jobdw capacity=1GiB", "#DW stage_in type=list source=/home/alice/files")
    )
    assert [(s.type, s.source, s.destination) for s in d.stage_in] == [
        ("list", "/home/alice/files", "$DW_JOB_STRIPED")
    ]
    for line in (
        "#DW stage_in type=file source=/home/alice/a",
        "#DW stage_out type=list source=$DW_JOB_STRIPED/list",
    ):
        with pytest.raises(
            DirectiveError, match="^line 3: stage_(in|out): destination is required$"
        ):
            parse_script(script("#DW jobdw capacity=1GiB", line))
    with pytest.raises(DirectiveError, match="the job has no buffer for \\$DW_JOB_STRIPED"):
        parse_script(script("#DW stage_in type=list source=/home/alice/files"))


def test_only_the_leading_comment_block_counts_and_continuations_join():
    """The block ends at the first line, not empty, that does not start with '#'. An empty line
    used to end it and a `\\` to join any comment line: Slurm's _xlate_batch does neither (it
    skips empty lines, and joins only the next directive line of the same prefix), so it read
    directives dac never saw (issue 45; test_directive_lines.py has each case)."""
    d = parse_script(
        script(
            "#DW jobdw \\",
            "#DW capacity=1GiB access_mode=private",
            "",
            "#DW persistentdw name=p1",
            " #DW jobdw capacity=bogus",  # starts with a space: the block ends here
            "#DW jobdw capacity=bogus",
        )
    )
    assert jobdw(d).capacity == GiB and jobdw(d).access == "private" and jobdw(d).line == 2
    assert d.persistent == ["p1"] and d.persistent_lines == [5]
    assert parse_script("echo hi\n#DW jobdw capacity=0\n").empty


@pytest.mark.parametrize(
    "lines,message",
    [
        (
            ["#DW jobdw capacity=1GiB", "#DW jobdw capacity=2GiB"],
            "line 3: jobdw: a job may have only one jobdw (the first is on line 2)",
        ),
        (["#DW jobdw access_mode=striped"], "line 2: jobdw: capacity is required"),
        (["#DW jobdw capacity=0GiB"], "line 2: jobdw: capacity '0GiB' must be greater than zero"),
        (["#DW jobdw capacity=lots"], "line 2: jobdw: capacity 'lots' is not a size like 1TiB"),
        (
            ["#DW jobdw capacity=1GiB type=cache"],
            "line 2: jobdw: type=cache is not supported yet; use type=scratch",
        ),
        (
            ["#DW jobdw capacity=1GiB capcity=2"],
            "line 2: jobdw: unknown key 'capcity' (expected capacity, access_mode, type, pool)",
        ),
        (
            ["#DW jobdw capacity=1GiB access_mode=ldbalance"],
            "line 2: jobdw: access_mode 'ldbalance' must be striped, private or striped,private",
        ),
        (["#DW jobdw capacity=1GiB capacity=2GiB"], "line 2: jobdw: capacity is given twice"),
        (["#DW jobdw capacity=1GiB oops"], "line 2: jobdw: 'oops' is not key=value"),
        (["#DW jobd capacity=1GiB"], "line 2: jobd: unknown directive (expected one of jobdw,"),
        (["#DW"], "line 2: directive: is empty"),
        (
            ["#DW persistentdw name=1abc"],
            "line 2: persistentdw: name '1abc' must start with a letter",
        ),
        (["#BB create_persistent name=a/b capacity=1G"], "name 'a/b' must start with a letter"),
        (
            [
                "#DW jobdw capacity=1GiB",
                "#DW stage_in type=file source=data destination=$DW_JOB_STRIPED/x",
            ],
            "line 3: stage_in: source 'data' must be an absolute path",
        ),
        (
            [
                "#DW jobdw capacity=1GiB",
                "#DW stage_in type=file source=/a/../etc/shadow destination=$DW_JOB_STRIPED/x",
            ],
            "line 3: stage_in: source '/a/../etc/shadow' must not contain '..'",
        ),
        (
            ["#DW jobdw capacity=1GiB", "#DW stage_in type=file source=/a destination=/tmp/x"],
            "line 3: stage_in: destination must be under $DW_JOB_STRIPED",
        ),
        (
            ["#DW jobdw capacity=1GiB", "#DW stage_out type=file source=/a destination=/b"],
            "line 3: stage_out: source must be under $DW_JOB_STRIPED",
        ),
        (
            ["#DW stage_in type=file source=/a destination=$DW_JOB_STRIPED/x"],
            "line 2: stage_in: the job has no buffer for $DW_JOB_STRIPED (add a #DW jobdw line)",
        ),
        (
            [
                "#DW jobdw capacity=1GiB access_mode=striped,private",
                "#DW stage_in type=file source=/a destination=$DW_JOB_PRIVATE/x",
            ],
            "line 3: stage_in: $DW_JOB_PRIVATE cannot be staged (one directory per compute "
            "node, and "
            "stages run on none): use $DW_JOB_STRIPED",
        ),
        (
            [
                "#DW persistentdw name=p1",
                "#DW stage_out type=file source=$DW_PERSISTENT_STRIPED_p1/x destination=/a",
            ],
            "line 3: stage_out: $DW_PERSISTENT_STRIPED_p1 cannot be staged (a persistent buffer is "
            "filled by the jobs that attach it): use $DW_JOB_STRIPED",
        ),
        (
            [
                "#DW jobdw capacity=1GiB access_mode=private",
                "#DW stage_in type=file source=/a destination=$DW_JOB_STRIPED/x",
            ],
            "line 3: stage_in: $DW_JOB_STRIPED needs access_mode=striped on the jobdw line (it has "
            "private)",
        ),
        (
            [
                "#DW jobdw capacity=1GiB",
                "#DW stage_in type=tarball source=/a destination=$DW_JOB_STRIPED",
            ],
            "type 'tarball' must be file, directory or list",
        ),
        (["#DW swap 4GiB"], "line 2: swap: swap needs a #DW jobdw buffer"),
        (["#DW jobdw capacity=1GiB", "#DW swap size=4GiB"], "line 3: swap: expected one size"),
        (["#DW jobdw capacity=1GiB source='/a b'"], "line 2: jobdw: contains a quote"),
        (
            ["#DW persistentdw name=p", "#DW persistentdw name=p"],
            "line 3: persistentdw: 'p' is attached twice",
        ),
        (["#BB destroy_persistent name=p quickly"], "'quickly' is not key=value"),
    ],
)
def test_refusals_are_one_line_naming_line_directive_and_reason(lines, message):
    with pytest.raises(DirectiveError) as e:
        parse_script(script(*lines))
    assert "\n" not in str(e.value)
    assert str(e.value).startswith("line ") and message in str(e.value), str(e.value)


def test_invalid_utf8_is_refused_not_crashed_on():
    with pytest.raises(DirectiveError, match="line 1: directive: is not valid UTF-8"):
        parse_script(b"#DW jobdw capacity=1GiB pool=\xff\xfe\n")


directive_words = st.sampled_from(
    [
        "jobdw",
        "persistentdw",
        "stage_in",
        "stage_out",
        "swap",
        "create_persistent",
        "destroy_persistent",
        "hurry",
        "capacity=1GiB",
        "capacity=0",
        "name=x",
        "name=",
        "type=file",
        "source=/a",
        "destination=$DW_JOB_STRIPED/b",
        "access=private",
        "access_mode=striped,private",
        "pool=p",
        "=",
        "==",
        "$",
        "${DW_JOB_STRIPED}",
        "\\",
        "'",
        "é",
        "\x00",
        "🙂",
    ]
)
lines = st.one_of(
    st.text(max_size=80),
    st.builds(
        lambda p, ws: p + " " + " ".join(ws),
        st.sampled_from(["#DW", "#BB", "#BB_LUA", "#SBATCH", "#", "#DW\t"]),
        st.lists(st.one_of(directive_words, st.text(max_size=12)), max_size=8),
    ),
)


@settings(max_examples=600, deadline=None)
@given(st.lists(lines, max_size=12), st.booleans())
def test_no_input_however_odd_escapes_as_anything_but_a_one_line_directive_error(ls, as_bytes):
    text = "\n".join(ls)
    try:
        parse_script(text.encode("utf-8", "surrogatepass") if as_bytes else text)
    except DirectiveError as e:
        assert "\n" not in str(e) and str(e).startswith("line ")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_raise_anything_else(data):
    try:
        parse_script(b"#DW " + data)
    except DirectiveError as e:
        assert "\n" not in str(e)


def test_huge_scripts_are_read_in_bounded_time():
    import time

    start = time.monotonic()
    big = "#!/bin/bash\n" + "#SBATCH --comment=x\n" * 9_998 + "#DW jobdw capacity=1GiB\n"
    assert jobdw(parse_script(big)).line == 10_000  # the most lines (test_directive_bounds.py)
    with pytest.raises(DirectiveError, match="line 3: jobdw: a job may have only one jobdw"):
        parse_script("#!/bin/sh\n" + "#DW jobdw capacity=1GiB\n" * 9_999)
    body = b"#!/bin/sh\n#DW jobdw capacity=1GiB\necho x\n" + b"\x00\xff" * 10_000_000
    assert jobdw(parse_script(body)).capacity == GiB
    assert time.monotonic() - start < 10

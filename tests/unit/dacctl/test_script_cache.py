"""The job script's directives, parsed once per content for job_process and paths
(daccore/services/slurm_functions.py `directives`): the script is read every call, a cached
parse is used only for the same bytes and the same lua_directive, each call gets its own copy,
and a refused script is refused each time in the same words."""

import os

import pytest

from daccore.rules.directives import DirectiveError, Directives, parse_script
from daccore.services import slurm_functions as datawarp
from daccore.services.slurm_functions import CallFiles, SlurmCall

JOBDW = b"#!/bin/bash\n#DW jobdw capacity=1GiB access_mode=striped type=scratch\n"
LUA = b"#!/bin/bash\n#SITE jobdw capacity=2GiB access_mode=striped type=scratch\n"
PERSIST = b"#!/bin/bash\n#BB persistentdw name=alpha\n#DW persistentdw name=beta\n"


def fields(d):
    return {name: getattr(d, name) for name in Directives.__slots__}


@pytest.fixture(autouse=True)
def empty_cache():
    datawarp._parse_cached.cache_clear()
    yield
    datawarp._parse_cached.cache_clear()


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "script"

    def call(data, function="job_process", lua="BB_LUA"):
        path.write_bytes(data)
        fd = os.open(path, os.O_RDONLY)
        hot = function in ("job_process", "paths")
        call = SlurmCall(function, job=str(path), hot=hot, files=CallFiles(script=fd))
        try:
            return datawarp.directives(call, lua)
        finally:
            os.close(fd)

    return call


def test_same_bytes_parsed_once_and_equal_to_a_parse(script):
    first = script(JOBDW)
    second = script(JOBDW, function="paths")
    assert fields(first) == fields(second) == fields(parse_script(JOBDW))
    assert first.jobdw.capacity == 1 << 30
    info = datawarp._parse_cached.cache_info()
    assert (info.hits, info.misses) == (1, 1)


def test_the_script_is_read_every_call(script):
    assert script(JOBDW).jobdw.capacity == 1 << 30
    changed = script(JOBDW.replace(b"1GiB", b"3GiB"))
    assert changed.jobdw.capacity == 3 << 30
    assert script(PERSIST).persistent == ["alpha", "beta"]


def test_lua_directive_is_part_of_the_key(script):
    assert script(LUA, lua="SITE").jobdw.capacity == 2 << 30
    assert script(LUA).jobdw is None  # `#SITE` is only a comment under BB_LUA
    assert script(LUA, lua="SITE").jobdw.capacity == 2 << 30
    assert script(LUA, lua="OTHER").jobdw is None


def test_each_call_gets_its_own_copy(script):
    first = script(PERSIST)
    first.persistent.append("mallory")
    first.persistent_lines.append(9)
    first.jobdw = "changed"
    again = script(PERSIST)
    assert again.persistent == ["alpha", "beta"] and again.persistent_lines == [2, 3]
    assert again.jobdw is None and again is not first


def test_a_refused_script_is_refused_each_time_in_the_same_words(script):
    bad = b"#!/bin/bash\n#DW jobdw capacity=lots access_mode=striped type=scratch\n"
    with pytest.raises(DirectiveError) as expected:
        parse_script(bad)
    for _ in range(2):
        with pytest.raises(DirectiveError) as e:
            script(bad)
        assert str(e.value) == str(expected.value)
    assert datawarp._parse_cached.cache_info().currsize == 0


def test_only_the_hot_functions_and_small_scripts_are_cached(script):
    script(JOBDW, function="setup")
    comment = b"# " + b"x" * 97 + b"\n"
    big = JOBDW + comment * (datawarp.PARSE_CACHE_BYTES // len(comment) + 1)
    assert script(big).jobdw.capacity == 1 << 30
    assert datawarp._parse_cached.cache_info().currsize == 0


def test_a_script_is_read_as_far_as_its_leading_comment_block(tmp_path):
    """All a parse reads of it (daccore.rules.directives): a long body costs one read, and
    a long comment block no more than its bound."""
    from daccore.records.bounds import MAX_SCRIPT_HEAD

    def read(data):
        path = tmp_path / "script"
        path.write_bytes(data)
        fd = os.open(path, os.O_RDONLY)
        try:
            call = SlurmCall("job_process", job=str(path), files=CallFiles(script=fd))
            return datawarp.script_bytes(call)
        finally:
            os.close(fd)

    body = JOBDW + b"srun x\n" * 500_000
    assert read(body) == body[: datawarp.READ_CHUNK]
    comments = JOBDW + b"#\n" * MAX_SCRIPT_HEAD
    assert MAX_SCRIPT_HEAD < len(read(comments)) <= MAX_SCRIPT_HEAD + datawarp.READ_CHUNK
    assert read(JOBDW) == JOBDW  # no command at all: to its end
    # the comment block ends where a read ends: the next read's first byte says so
    at_edge = JOBDW + b"#" * (datawarp.READ_CHUNK - len(JOBDW) - 1) + b"\n" + b"srun x\n" * 50_000
    assert read(at_edge) == at_edge[: 2 * datawarp.READ_CHUNK]


def test_bounded(script):
    for i in range(datawarp.PARSE_CACHE + 10):
        script(JOBDW + b"# %d\n" % i)
    assert datawarp._parse_cached.cache_info().currsize == datawarp.PARSE_CACHE

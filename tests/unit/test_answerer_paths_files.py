"""The answerer's paths files and valid files (dacservice/answerer/published.py). Paths files: one
per `buffers/<job id>` the mirror holds, holding the very text `dacctl --function paths`
writes for the job (datawarp's `buffer_paths`), rewritten when the spec's revision or the
mount root moves, removed with the spec; none for a spec `paths` could not read, nor for a
name that is no job id; what an answerer before left is removed at the start; closed like the
socket's directory. Valid files: the kept job_process answers of the mirror's content now,
each named as burst_buffer.lua names its request, 0600."""

import json
import os
import random
import stat
import subprocess
from pathlib import Path

import pytest

from daccore.etcd.types import KV, Event
from daccore.services.slurm_functions import buffer_paths
from daccore.share import asset
from dacservice.answerer.mirror import Mirror
from dacservice.answerer.published import PathsFiles, ValidFiles, paths_file, valid_name


def _spec(access="striped", persistent=()):
    return json.dumps({"name": "x", "request": {"access": access, "persistent": list(persistent)}})


def _put(m: Mirror, name: str, value: str, rev: int) -> None:
    m._apply([Event("put", KV(m.keys.buffers + name, value.encode(), rev, rev, 1))])


def _files(pf: PathsFiles) -> dict[str, bytes]:
    return {n: open(os.path.join(pf.path, n), "rb").read() for n in sorted(os.listdir(pf.path))}


def _text(job, access, persistent, root):
    body = buffer_paths(job, json.loads(_spec(access, persistent)), root).encode()
    return b"dac-paths/1 %d\n" % len(body) + body


def test_each_job_buffer_gets_the_forks_text_and_follows_the_mirror(tmp_path):
    m = Mirror(None, "/dac")  # type: ignore[arg-type]  # never started: no etcd
    _put(m, "12", _spec("striped,private", ["proj1"]), 5)
    _put(m, "proj1", _spec(), 6)  # a persistent buffer's name: no job's
    _put(m, "13", "not json", 7)  # paths could not read it: asked, it answers as the fork
    _put(m, "14", _spec(access=["striped"]), 8)
    pf = PathsFiles(str(tmp_path), os.getgid(), 0o750)
    assert pf.update(m, "/mnt/dac") == 1
    want = _text("12", "striped,private", ["proj1"], "/mnt/dac")
    assert want.startswith(b"dac-paths/1 ")
    assert b"DW_JOB_STRIPED=/mnt/dac/12/striped\nDW_JOB_PRIVATE=" in want
    assert _files(pf) == {"12": want}
    st = os.stat(os.path.join(pf.path, "12"))
    assert stat.S_IMODE(st.st_mode) == 0o640
    assert stat.S_IMODE(os.stat(pf.path).st_mode) == 0o750

    assert pf.update(m, "/mnt/dac") == 0  # nothing moved: nothing written
    _put(m, "15", _spec("private"), 9)
    _put(m, "13", _spec(), 10)  # mended
    assert pf.update(m, "/mnt/dac") == 2
    assert set(_files(pf)) == {"12", "13", "15"}
    m._apply([Event("delete", KV(m.keys.buffers + "12", b"", 0, 11, 0))])
    _put(m, "15", "{}", 12)  # no longer readable: its file goes
    assert pf.update(m, "/mnt/dac") == 2
    assert set(_files(pf)) == {"13"}
    assert pf.update(m, "/elsewhere") == 1  # a new mount root: every file again
    assert _files(pf) == {"13": _text("13", "striped", [], "/elsewhere")}


def test_a_new_answerer_removes_what_one_before_left_and_close_removes_its_own(tmp_path):
    old = tmp_path / "paths"
    old.mkdir()
    (old / "99").write_bytes(b"dac-paths/1 4\nX=1\n")
    pf = PathsFiles(str(tmp_path), os.getgid(), 0o700)
    assert os.listdir(pf.path) == []
    m = Mirror(None, "/dac")  # type: ignore[arg-type]
    _put(m, "1", _spec(), 2)
    pf.update(m, "/m")
    pf.clear()
    assert not old.exists()


def test_a_spec_paths_could_not_read_gets_no_file():
    for value in (b"[]", b'{"request": 1}', b'{"request": {"access": "striped"}}',
                  b'{"request": {"access": "striped", "persistent": [1]}}', b"\xff"):  # fmt: skip
        assert paths_file("7", value, "/m") is None, value
    assert (
        paths_file("7", _spec().encode(), "/m") == b"dac-paths/1 28\nDW_JOB_STRIPED=/m/7/striped\n"
    )


# -- the valid files ---------------------------------------------------------------------------


def test_valid_files_hold_the_kept_answers_of_the_mirrors_content_and_go_when_it_moves(tmp_path):
    vf = ValidFiles(str(tmp_path), os.getgid(), 0o750, -1)
    one, two = ("--user 1001", b"#!/bin/sh\n#DW jobdw capacity=1GiB\n"), ("", b"#!/bin/sh\n")
    assert vf.sync("content 1", [one, two]) == 2
    files = {n: (Path(vf.path) / n).read_bytes() for n in os.listdir(vf.path)}
    assert files == {
        valid_name(*one): b"dac-valid/1 11 %d\n--user 1001" % len(one[1]) + one[1],
        valid_name(*two): b"dac-valid/1 0 10\n#!/bin/sh\n",
    }
    st = os.stat(Path(vf.path) / valid_name(*one))
    assert stat.S_IMODE(st.st_mode) == 0o600  # a user's script: SlurmUser's alone
    assert vf.sync("content 1", [one, two]) == 0  # nothing new
    assert vf.sync("content 1", [one]) == 1  # the memo started again: its file goes
    assert os.listdir(vf.path) == [valid_name(*one)]
    assert vf.sync("content 2", []) == 1  # etcd moved: every file goes at once
    assert os.listdir(vf.path) == []
    vf.sync("content 2", [two])
    vf.clear()
    assert not os.path.exists(vf.path)


@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 127, 128, 1000, 4096, 65536])
def test_valid_name_is_the_same_in_lua(tmp_path, n):
    """burst_buffer.lua's valid_name is this module's: the file a request is looked up by is
    the one the answerer wrote."""
    rnd = random.Random(n)
    script = bytes(rnd.randrange(256) for _ in range(n))
    cases = [("", script), ("--user 1001", script), ("--user 4294967294", script)]
    lua = tmp_path / "name.lua"
    lua.write_text(
        "slurm = {SUCCESS = 0, ERROR = -1}\n"
        + _local_function(asset("slurm", "burst_buffer.lua").read_text(), "valid_name")
        + "for i = 1, #arg, 2 do\n"
        "  local f = io.open(arg[i + 1], 'rb'); local s = f:read('*a'); f:close()\n"
        "  io.write(valid_name(arg[i], s), '\\n')\nend\n"
    )
    argv = []
    for i, (words, data) in enumerate(cases):
        (tmp_path / f"s{i}").write_bytes(data)
        argv += [words, str(tmp_path / f"s{i}")]
    r = subprocess.run(["lua5.1", str(lua), *argv], capture_output=True, text=True, check=True)
    assert r.stdout.split() == [valid_name(w, s) for w, s in cases]


def _local_function(source: str, name: str) -> str:
    """`local function name(...) ... end` cut out of burst_buffer.lua (a top-level one)."""
    start = source.index(f"local function {name}(")
    return source[start : source.index("\nend\n", start) + 5]

import os
from fractions import Fraction
from typing import cast

import pytest

from daccore.errors import StoreUnavailable
from daccore.records.models import Pool
from daccore.rules.directives import parse_script
from daccore.services import estimate as est
from dacd.staging import copier

MiB, GiB = 1 << 20, 1 << 30


@pytest.fixture
def tree(tmp_path):
    """3 regular files (one sparse), 3 directories, a symlink, a fifo the copier skips."""
    src = tmp_path / "src"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "a").write_bytes(b"x" * 5000)
    (src / "sub" / "b").write_bytes(b"y" * 100)
    with open(src / "sub" / "deeper" / "sparse", "wb") as f:
        f.truncate(64 * MiB)
    (src / "link").symlink_to("a")
    os.mkfifo(src / "fifo")
    return src


def test_measure_counts_a_tree_as_the_copier_walks_it(tree):
    m = est.measure("directory", str(tree))
    assert (m.files, m.dirs, m.links, m.inodes) == (3, 3, 1, 7)
    assert m.bytes == 5000 + 100 + 64 * MiB
    assert m.allocated < m.bytes  # the sparse file holds no blocks: du counts less
    assert m.problems == []


class InlineWorkers:
    """The copier's worker pool, run in this process: each task copied as it is sent."""

    def send(self, task, on_result):
        kind, items = task
        on_result(*(copier.copy_files(items) if kind == "files" else (copier.copy_chunk(items), 0)))

    def drain(self, on_result):
        pass


def test_measure_agrees_with_the_copiers_walk(tree, tmp_path, monkeypatch):
    # the copier keeps its destinations' anchors for the life of its process: this one's go
    monkeypatch.setattr(copier, "_ROOTS", [])
    monkeypatch.setattr(copier, "_LAST", ["", -1])
    inside = tmp_path / "buffer"
    inside.mkdir()
    pairs = copier.check(
        [{"type": "directory", "source": str(tree), "destination": str(inside / "in")}],
        str(inside),
        "destination",
    )
    # InlineWorkers stands in for Workers, whose send and drain it has: no class of theirs
    workers = cast(copier.Workers, InlineWorkers())
    c = copier.Copy(workers, lambda c, final=False: None, chunk=1 << 20)
    c.run(pairs)
    m = est.measure("directory", str(tree))
    assert (m.bytes, m.files + m.links, m.dirs) == (c.bytes_total, c.files_total, len(c.dirs))
    assert (c.bytes_done, c.files_done) == (c.bytes_total, c.files_total)


def test_measure_reads_a_list_of_sources_and_destinations(tree, tmp_path):
    listing = tmp_path / "list"
    listing.write_text(f"# what to stage\n{tree / 'a'} a\n\n{tree / 'sub'} sub\nbad line here\n")
    m = est.measure("list", str(listing))
    assert (m.files, m.dirs, m.bytes) == (3, 2, 5000 + 100 + 64 * MiB)
    assert m.problems == [(f"{listing} line 5", "expected 'source destination'")]


def test_measure_reports_what_the_stage_in_would_fail_on(tree, monkeypatch):
    missing = est.measure("file", str(tree / "nope"))
    assert missing.problems == [(str(tree / "nope"), "no such file or directory")]
    assert est.measure("directory", str(tree / "a")).problems == [
        (str(tree / "a"), "not a directory")
    ]
    # root reads everything, so stand in for the kernel's answer to a user here
    # (tests/system/test_admin_cli.py checks it for real, as another user)
    monkeypatch.setattr(os, "access", lambda path, mode: not path.endswith("/b"))
    m = est.measure("directory", str(tree))
    assert m.problems == [(str(tree / "sub" / "b"), "not readable")] and m.files == 3


def test_only_the_first_problems_are_kept_but_all_are_counted(tmp_path, monkeypatch):
    for i in range(8):
        (tmp_path / f"f{i}").write_text("z")
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    m = est.measure("directory", str(tmp_path))
    assert m.problem_count == 8 and len(m.problems) == est.MAX_PROBLEMS


@pytest.mark.parametrize(
    "text,value",
    [
        ("0.25", Fraction(1, 4)),
        ("25%", Fraction(1, 4)),
        ("0.1", Fraction(1, 10)),
        ("0", 0),
        ("12.5%", Fraction(1, 8)),
    ],
)
def test_a_margin_is_a_fraction_or_a_percentage_exactly(text, value):
    assert est.parse_margin(text) == value


@pytest.mark.parametrize("text", ["x", "-0.1", "11", "%"])
def test_a_bad_margin_is_refused(text):
    with pytest.raises(ValueError, match=f"'{text}'"):
        est.parse_margin(text)


def test_a_suggested_size_parses_back_to_exactly_the_bytes():
    assert est.suggest_size(3 * 512 * MiB) == "1536MiB"  # Slurm reads 1.5GiB as 1 byte
    assert est.suggest_size(1537 * MiB) == "1537MiB"
    assert est.suggest_size(3 * 10**12) == "3TB"
    assert est.suggest_size(2 * GiB) == "2GiB"
    assert est.suggest_size(1000 * MiB + 1) == str(1000 * MiB + 1)


def test_advice_adds_the_margin_and_rounds_up_to_whole_bricks():
    a = est.advise(1 * GiB, Fraction(1, 4), 512 * MiB, None)
    assert a["with_margin"] == 1280 * MiB and a["bricks"] == 3
    assert a["capacity"] == 1536 * MiB and a["suggestion"] == "1536MiB"
    assert a["verdict"] == "no jobdw"


def test_advice_without_a_pool_rounds_to_whole_mib():
    a = est.advise(1000, Fraction(1, 10), None, 5 * MiB)
    assert a["bricks"] is None and a["capacity"] == MiB and a["verdict"] == "enough"


def test_advice_says_whether_the_jobdw_holds_the_data_and_the_margin():
    # a 600 MiB jobdw is allocated as 2 bricks of 512 MiB: what counts is the allocation
    assert est.advise(900 * MiB, Fraction(1, 4), 512 * MiB, 600 * MiB)["verdict"] == "tight"
    assert est.advise(700 * MiB, Fraction(1, 4), 512 * MiB, 600 * MiB)["verdict"] == "enough"
    assert est.advise(1100 * MiB, Fraction(1, 4), 512 * MiB, 600 * MiB)["verdict"] == "too small"


def test_nothing_to_stage_still_advises_one_brick():
    assert est.advise(0, Fraction(1, 4), 512 * MiB, None)["capacity"] == 512 * MiB


def pools(*names, granularity=512 * MiB):
    return lambda: {n: Pool(name=n, granularity=granularity) for n in names}


def test_find_pool_uses_the_jobdw_pool_the_default_or_the_only_one():
    assert est.find_pool(pools("a", "b"), "b", None) == ("b", 512 * MiB, None)
    assert est.find_pool(pools("a", "b"), None, "a") == ("a", 512 * MiB, None)
    assert est.find_pool(pools("only"), None, None) == ("only", 512 * MiB, None)
    name, g, why = est.find_pool(pools("a", "b"), None, None)
    assert (name, g) == (None, None) and why is not None and "name a pool with pool=<name>" in why
    assert est.find_pool(pools("a"), "zz", None)[2] == "no pool named 'zz' (pools: a)"


def test_an_unreachable_etcd_leaves_the_pool_unknown_not_the_estimate_failed():
    def unreachable():
        raise StoreUnavailable(["http://127.0.0.1:1"], "connection refused", 5.0)

    name, g, why = est.find_pool(unreachable, "fast", None)
    assert (name, g) == ("fast", None) and why is not None and why.startswith("etcd unreachable at")


def test_the_report_adds_up_every_stage_in_line(tree):
    d = parse_script(
        f"#!/bin/sh\n#DW jobdw capacity=512MiB\n"
        f"#DW stage_in type=directory source={tree}/sub "
        "destination=$DW_JOB_STRIPED/s\n"
        f"#DW stage_in type=file source={tree}/a destination=$DW_JOB_STRIPED/a\n"
    )
    measured = [est.measure(s.type, s.source) for s in d.stage_in]
    r = est.report(d, measured, 10 * MiB, Fraction(1, 4), ("default", 512 * MiB, None))
    assert [x["line"] for x in r["stage_in"]] == [3, 4]
    assert r["bytes"] == 100 + 64 * MiB + 5000 and r["inodes"] == 5 and r["output"] == 10 * MiB
    assert r["needed"] == 5100 + 74 * MiB and r["verdict"] == "enough" and r["bricks"] == 1
    assert r["margin"] == 0.25 and est.problem_line(r, 1234) is None


def test_the_problem_line_names_the_first_path_and_counts_the_rest():
    rep = {
        "problem_count": 3,
        "stage_in": [
            {"line": 3, "problem_count": 0, "problems": []},
            {
                "line": 4,
                "problem_count": 3,
                "problems": [{"path": "/d/x", "reason": "not readable"}],
            },
        ],
    }
    assert est.problem_line(rep, 1234) == (
        "line 4: stage_in: /d/x: not readable (as uid 1234; the stage-in runs as you and would "
        "fail), and 2 more paths"
    )

"""The split copy (dacd/staging/share.py through dacd/staging/split.py) as real unprivileged
users run it: K in-process servers give the tree a single copier gives, byte for byte, with
its modes, times, ownership, links and holes; one failed share fails the stage naming it."""

import os

import pytest
from stage_trees import MiB, buffer_for, fs_root, seen, tree, write

from daccore.errors import UserError
from dacd.staging import run as staging
from dacd.staging import split as staging_split


@pytest.mark.parametrize("servers", [1, 2, 3, 5])
def test_a_split_copy_gives_the_tree_one_copier_gives(open_dir, servers):
    src = open_dir / "src"
    tree(src)
    one, split = fs_root(open_dir / "one"), fs_root(open_dir / "split")
    staging.stage(buffer_for(src), "in", str(one), 2, lambda p: None)
    progress: list[dict] = []
    staging_split.split_here(
        buffer_for(src), "in", str(split), 2, progress.append, 60, staging.Run(), servers, MiB
    )
    a, b = seen(one / "striped" / "in"), seen(split / "striped" / "in")
    assert a.keys() == b.keys() and len(a) == 3 + 450 + 4
    for name in a:
        assert a[name] == b[name], name
    blocks = os.stat(split / "striped" / "in" / "sparse").st_blocks * 512
    assert blocks <= 8 * MiB  # the holes stayed holes
    final = progress[-1]
    total = sum(f * 13 for f in range(150)) * 3 + 5 * MiB + 777 + 64 * MiB
    assert final == {
        "bytes_done": total,
        "bytes_total": total,
        "files_done": 450 + 4,
        "files_total": 450 + 4,
        "rate": final["rate"],
        "eta": 0.0,
        "counting": False,
    }
    assert all(p["bytes_total"] == total and p["bytes_done"] <= total for p in progress)


def test_a_failed_share_fails_the_stage_naming_the_server_and_the_path(open_dir):
    src = open_dir / "src"
    tree(src)
    secret = src / "d2" / "f8"  # 0600
    os.chown(secret, 0, 0)
    split = fs_root(open_dir / "split")
    with pytest.raises(UserError) as e:
        staging_split.split_here(
            buffer_for(src), "in", str(split), 2, lambda p: None, 60, staging.Run(), 3, MiB
        )
    assert str(e.value) in {
        f"stage_in failed on share{i}: {secret}: Permission denied" for i in range(3)
    }


def test_a_source_changed_after_the_plan_fails_the_share_not_the_copy(open_dir):
    src = open_dir / "src"
    tree(src)
    split = fs_root(open_dir / "split")
    run = staging.Run()
    plans: list[dict] = []
    result, _, rc = staging_split.lead(
        buffer_for(src), "in", str(split), 2, 2, plans.append, lambda p: None, 60, run, MiB
    )
    assert (rc, result) == (0, {"plan": result["plan"], "done": True})
    assert plans == [{**result["plan"], "split": MiB}]
    write(src / "d0" / "new", b"late")
    result, _, rc = staging_split.run_share(
        buffer_for(src), "in", str(split), 2, plans[0], 1, lambda p: None, 60, run
    )
    assert (rc, result) == (1, {"error": f"{src}: the source changed after the stage was planned"})

"""The daos backend's real playbooks, run by ansible-runner against the recorded-command site
(tests/site: strict stand-ins for dmg, daos, dfuse and fusermount3, which see the uid they run
as). Each test asserts the full ordered list of commands, and who ran them."""

import sys
from pathlib import Path

import pytest
from recorded_site import GiB, RecordedSite, closure, passable_only_to, reach
from security.staging_dac import OTHER_GID, OTHER_UID

from daccore.backends.lustre import passable_to
from daccore.errors import PlaybookFailed
from daclocal.slurm import ensure_submit_user

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "site"))
import daos_files  # noqa: E402  (tests/site: reads and writes through a dfuse mount)
from sitelib import Site  # noqa: E402

NODE = "<site>/nodes/{node}/7/striped"
NOCACHE = "--disable-caching"


def scm(nvme: int) -> int:
    """The SCM dac gives a pool per rank for `nvme` bytes of NVMe: 6/94 of it (dmg's default
    tier ratio), in whole MiB."""
    return int(nvme * 6 / 94) >> 20 << 20


@pytest.fixture
def user():
    return ensure_submit_user()


@pytest.fixture
def site(open_dir):
    # open_dir: the stand-ins run as the job's user too, and must reach the site's files
    return lambda hosts, bricks=1, **kw: RecordedSite(open_dir / "site", hosts, bricks, **kw)


def calls_as(calls, uid):
    """(uid, host, argv...) of each call; root and the job's user only, never anybody else."""
    assert {c["uid"] for c in calls} <= {0, uid}
    return [("user" if c["uid"] == uid else "root", c["host"], *c["argv"]) for c in calls]


def site_paths(site, cmds):
    root = str(site.root)
    return [tuple(a.replace(root, "<site>") for a in c) for c in cmds]


def test_one_host_buffer_runs_exactly_these_commands(site, user):
    s = site(1, bricks=2)
    config = s.config("daos")
    buf = s.buffer([("dac1", 0), ("dac1", 1)], uid=user.pw_uid, gid=user.pw_gid)
    name, staging = user.pw_name, "<site>/dac1/fs/42/striped"
    acl = passable_to(user.pw_uid)

    s.run(config, "daos", buf, "create")
    calls = s.calls()
    assert site_paths(s, calls_as(calls, user.pw_uid)) == [
        ("user", "dac1", "fusermount3", "-u", staging),  # stop.yml first: nothing there yet
        ("root", "dac1", "dmg", "pool", "destroy", "--force", "--recursive", "dac-42"),
        (
            "root",
            "dac1",
            "dmg",
            "pool",
            "create",
            f"--scm-size={scm(200 * GiB)}",
            f"--nvme-size={200 * GiB}",
            "--ranks=0",
            f"--user={name}@",
            f"--group={name}@",
            "dac-42",
        ),
        ("root", "dac1", "dmg", "pool", "delete-acl", "--principal=GROUP@", "dac-42"),
        ("user", "dac1", "daos", "container", "create", "--type=POSIX", "dac-42", "posix"),
        ("root", "dac1", "setfacl", "--set", acl, "<site>/dac1/fs/42"),
        (
            "user",
            "dac1",
            "dfuse",
            f"--mountpoint={staging}",
            "--pool=dac-42",
            "--container=posix",
            NOCACHE,
        ),
    ]
    assert [c["rc"] for c in calls][2:] == [0, 0, 0, 0, 0]
    pool = s.state()["daos"]["pools"]["dac-42"]
    assert pool["acl"] == ["A::OWNER@:rw"]  # owner-only
    # the staging mount's parent: root's, 0700, passable by its owner alone (issue 45)
    assert closure(s.root / "dac1" / "fs" / "42") == (0, "0o710", passable_only_to(user.pw_uid))

    attached = {"7": ["node1", "node2"]}
    s.run(config, "daos", buf.model_copy(update={"attachments": attached}), "mount")
    calls = s.calls()
    assert site_paths(s, calls_as(calls, user.pw_uid)) == [
        ("root", n, "setfacl", "--set", acl, f"<site>/nodes/{n}/7") for n in ("node1", "node2")
    ] + [
        (
            "user",
            n,
            "dfuse",
            f"--mountpoint={NODE.format(node=n)}",
            "--pool=dac-42",
            "--container=posix",
            NOCACHE,
        )
        for n in ("node1", "node2")
    ]
    assert all(c["rc"] == 0 for c in calls)
    for n in ("node1", "node2"):  # closed before the user's dfuse mounted below it
        assert closure(s.root / "nodes" / n / "7") == (0, "0o710", passable_only_to(user.pw_uid))

    s.run(config, "daos", buf, "unmount", attached=attached)
    calls = s.calls()
    assert site_paths(s, calls_as(calls, user.pw_uid)) == [
        ("user", n, "fusermount3", "-u", NODE.format(node=n)) for n in ("node1", "node2")
    ]
    assert all(c["rc"] == 0 for c in calls)
    assert not (s.root / "nodes" / "node1" / "7").exists()  # mount points and their parents

    s.run(config, "daos", buf, "delete")
    calls = s.calls()
    assert site_paths(s, calls_as(calls, user.pw_uid)) == [
        ("user", "dac1", "fusermount3", "-u", staging),
        ("root", "dac1", "dmg", "pool", "destroy", "--force", "--recursive", "dac-42"),
    ]
    assert all(c["rc"] == 0 for c in calls)
    assert s.state()["daos"]["pools"] == {} and not any(s.state()["daos"]["dfuse"].values())
    assert not (s.root / "dac1" / "fs" / "42").exists()


def test_four_hosts_pool_spans_the_ranks_of_its_bricks(site, user):
    s = site(4)
    config = s.config("daos")
    buf = s.buffer(
        [("dac2", 0), ("dac1", 0), ("dac3", 0), ("dac4", 0)], uid=user.pw_uid, gid=user.pw_gid
    )
    s.run(config, "daos", buf, "create")
    cmds = site_paths(s, calls_as(s.calls(), user.pw_uid))
    create = [c for c in cmds if c[2:5] == ("dmg", "pool", "create")]
    assert create == [
        (
            "root",
            "dac2",
            "dmg",
            "pool",
            "create",
            f"--scm-size={scm(100 * GiB)}",
            f"--nvme-size={100 * GiB}",
            "--ranks=0,2,4,6",
            f"--user={user.pw_name}@",
            f"--group={user.pw_name}@",
            "dac-42",
        )
    ]
    assert {c[1] for c in cmds} == {"dac2"}  # dmg and the staging dfuse: the primary only
    s.run(config, "daos", buf, "delete")
    assert s.state()["daos"]["pools"] == {}


def test_teardown_after_a_create_that_failed_half_way(site, user):
    s = site(2)
    config = s.config("daos")
    buf = s.buffer([("dac1", 0), ("dac2", 0)], uid=user.pw_uid, gid=user.pw_gid)
    s.fail(
        "daos",
        ["container"],
        rc=1,
        stderr="ERROR: daos: failed to create container: DER_NOSPACE(-1007): No space",
    )
    with pytest.raises(PlaybookFailed) as e:
        s.run(config, "daos", buf, "create")
    assert e.value.task == "create the container as the user" and e.value.host == "dac1"
    assert "DER_NOSPACE" in str(e.value)
    assert list(s.state()["daos"]["pools"]) == ["dac-42"]
    s.calls()
    s.run(config, "daos", buf, "delete")
    calls = s.calls()
    assert site_paths(s, calls_as(calls, user.pw_uid)) == [
        ("user", "dac1", "fusermount3", "-u", "<site>/dac1/fs/42/striped"),
        ("root", "dac1", "dmg", "pool", "destroy", "--force", "--recursive", "dac-42"),
    ]
    assert calls[-1]["rc"] == 0 and s.state()["daos"]["pools"] == {}


def test_uneven_bricks_per_rank_ask_no_rank_for_more_than_dac_gave_it(site, user):
    """5 bricks of 150GiB on 4 ranks (2, 1, 1, 1) for 450GiB: DAOS gives a pool the same on
    every rank, so each rank gives 150GiB of NVMe (and 6/94 of it in SCM), the engines' free
    space in the site's facts. A --size of the allocation would ask 176GiB of NVMe and 11GiB
    of SCM of every rank: more than dac gave three of them, and more SCM than they have."""
    s = site(
        4,
        bricks=2,
        brick=150 * GiB,
        daos={"scm_bytes": 10 * GiB, "nvme_bytes": 150 * GiB, "targets": 16},
    )
    config = s.config("daos")
    buf = s.buffer(
        [("dac1", 0), ("dac1", 1), ("dac2", 0), ("dac3", 0), ("dac4", 0)],
        uid=user.pw_uid,
        gid=user.pw_gid,
        capacity=450 * GiB,
    )
    s.run(config, "daos", buf, "create")
    calls = s.calls()
    assert all(c["rc"] == 0 for c in calls[2:]), calls
    create = next(c["argv"] for c in calls if c["argv"][:3] == ["dmg", "pool", "create"])
    assert create[3:6] == [
        f"--scm-size={scm(150 * GiB)}",
        f"--nvme-size={150 * GiB}",
        "--ranks=0,2,4,6",
    ]
    pool = s.state()["daos"]["pools"]["dac-42"]
    assert pool["tier_bytes"] == [scm(150 * GiB), 150 * GiB]  # per rank
    assert pool["tier_bytes"][1] * 4 >= buf.request.capacity


def test_a_granularity_of_one_gib_per_target_makes_a_pool(site, user):
    """16 targets and 16GiB bricks: DAOS wants 1GiB of NVMe per target, which the whole brick
    gives (--size=16GiB would give the NVMe 94 % of it: refused, fault 605)."""
    s = site(1, brick=16 * GiB, granularity=16 * GiB, daos={"targets": 16})
    config = s.config("daos", targets=16)
    buf = s.buffer([("dac1", 0)], uid=user.pw_uid, gid=user.pw_gid)
    s.run(config, "daos", buf, "create")
    assert s.state()["daos"]["pools"]["dac-42"]["tier_bytes"] == [scm(16 * GiB), 16 * GiB]


def test_stage_out_right_after_the_nodes_wrote_reads_their_bytes(site, user):
    """Staging reads and writes through the primary's dfuse, which lives as long as the buffer;
    the job's nodes change the files through theirs. Stage-out soon after must copy the nodes'
    bytes, not what the primary's dfuse cached at stage-in (its cache serves data for 600 s)."""
    s = site(1)
    config = s.config("daos")
    buf = s.buffer([("dac1", 0)], uid=user.pw_uid, gid=user.pw_gid, attachments={"7": ["node1"]})
    s.run(config, "daos", buf, "create")
    s.run(config, "daos", buf, "mount")
    primary, node = Site(str(s.root), "dac1", "-"), Site(str(s.root), "node1", "-")
    staged = s.root / "dac1" / "fs" / "42" / "striped" / "input"
    daos_files.write(primary, str(staged), "stage-in bytes", now=1000)  # data_in
    daos_files.write(
        node,
        str(s.root / "nodes" / "node1" / "7" / "striped" / "input"),
        "the job's bytes",
        now=1010,
    )
    s.run(config, "daos", buf, "unmount", attached={"7": ["node1"]})  # post_run
    assert daos_files.read(primary, str(staged), now=1020) == "the job's bytes"  # data_out


def test_no_other_user_reaches_a_daos_buffers_mounts_and_its_owner_still_does(site, user):
    """Issue 45: an O_PATH open needs no permission on its target, only search permission on
    the directories above it, so a user who could pass through another's job directory could
    hold that job's dfuse mount open and read its usage with statvfs. Every directory above a
    dfuse mount point is root's, 0700, with an ACL letting the buffer's owner alone pass (the
    job's directory, persistent/, the primary's <fs_root>/<buffer>/), and dfuse and
    fusermount3, run as the owner, resolve and chdir through them as before. The probes run
    as real users: the owner reaches each mount, another user (uid 5678) none."""
    s = site(1, bricks=2)
    config = s.config("daos")
    job = {"7": ["node1"]}
    buf = s.buffer([("dac1", 0)], uid=user.pw_uid, gid=user.pw_gid, attachments=job)
    kept = s.buffer([("dac1", 1)], uid=user.pw_uid, gid=user.pw_gid, attachments=job, name="p1")
    kept = kept.model_copy(update={"persistent": True})
    for b in (buf, kept):
        s.run(config, "daos", b, "create")
        s.run(config, "daos", b, "mount")
    calls = s.calls()
    assert [c["rc"] for c in calls if c["argv"][0] in ("setfacl", "dfuse")] == [0] * 8
    node, fs = s.root / "nodes" / "node1" / "7", s.root / "dac1" / "fs"
    for d in (node, node / "persistent", fs / "42", fs / "p1"):
        assert closure(d) == (0, "0o710", passable_only_to(user.pw_uid)), d
    owner = (user.pw_uid, user.pw_gid)
    for path in (node / "striped", node / "persistent" / "p1", fs / "42" / "striped"):
        assert (reach(path, *owner), reach(path, OTHER_UID, OTHER_GID)) == ("ok", "EACCES")

    # the owner's fusermount3 -u chdirs to each mount point's parent as the owner
    for b in (kept, buf):
        s.run(config, "daos", b, "delete", attached=job)
    stops = [c for c in s.calls() if c["argv"][0] == "fusermount3"]
    assert [(c["host"], c["uid"], c["rc"]) for c in stops] == [
        ("node1", user.pw_uid, 0),
        ("dac1", user.pw_uid, 0),
    ] * 2
    assert not any(s.state()["daos"]["dfuse"].values())
    assert not node.exists() and not (fs / "42").exists() and not (fs / "p1").exists()


def test_the_owners_fusermount3_needs_the_acl_on_the_job_directory(site, user):
    """What the ACL is for: with the job's directory closed to its owner too (root's, 0700,
    its ACL's mask cleared by a chmod), the owner's fusermount3 -u is refused as libfuse
    refuses it: it chdirs to the mount point's parent with the caller's own rights."""
    s = site(1)
    config = s.config("daos")
    job = {"7": ["node1"]}
    buf = s.buffer([("dac1", 0)], uid=user.pw_uid, gid=user.pw_gid, attachments=job)
    s.run(config, "daos", buf, "create")
    s.run(config, "daos", buf, "mount")
    node = s.root / "nodes" / "node1" / "7"
    node.chmod(0o700)  # the mask (the group bits) now ---: the owner's entry counts for nothing
    with pytest.raises(PlaybookFailed) as e:  # the job ended: its attachment goes
        s.run(config, "daos", buf.model_copy(update={"attachments": {}}), "unmount", job)
    assert e.value.task == "stop dfuse where the buffer is no longer attached"
    assert f"failed to chdir to {node}: Permission denied" in str(e.value)
    assert s.state()["daos"]["dfuse"]["node1"]  # still mounted
    node.chmod(0o710)  # the mask back: the delete stops it
    s.run(config, "daos", buf, "delete", attached=job)
    assert not any(s.state()["daos"]["dfuse"].values()) and not node.exists()

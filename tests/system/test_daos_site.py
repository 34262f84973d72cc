"""The daos backend's real playbooks, run by ansible-runner against the recorded-command site
(tests/site: strict stand-ins for dmg, daos, dfuse and fusermount3, which see the uid they run
as). Each test asserts the full ordered list of commands, and who ran them."""

import pytest
from recorded_site import RecordedSite

from daccore.errors import PlaybookFailed
from daclocal.slurm import ensure_submit_user

NODE = "<site>/nodes/{node}/7/striped"


@pytest.fixture
def user():
    return ensure_submit_user()


@pytest.fixture
def site(open_dir):
    # open_dir: the stand-ins run as the job's user too, and must reach the site's files
    return lambda hosts, bricks=1: RecordedSite(open_dir / "site", hosts, bricks)


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

    s.run(config, "daos", buf, "create")
    calls = s.calls()
    assert site_paths(s, calls_as(calls, user.pw_uid)) == [
        ("user", "dac1", "fusermount3", "-u", staging),  # stop.yml first: nothing there yet
        ("root", "dac1", "dmg", "pool", "destroy", "--force", "--recursive", "dac-42"),
        ("root", "dac1", "dmg", "pool", "create", f"--size={200 << 30}", "--ranks=0",
         f"--user={name}@", f"--group={name}@", "dac-42"),
        ("root", "dac1", "dmg", "pool", "delete-acl", "--principal=GROUP@", "dac-42"),
        ("user", "dac1", "daos", "container", "create", "--type=POSIX", "dac-42", "posix"),
        ("user", "dac1", "dfuse", f"--mountpoint={staging}", "--pool=dac-42",
         "--container=posix"),
    ]
    assert [c["rc"] for c in calls][2:] == [0, 0, 0, 0]
    pool = s.state()["daos"]["pools"]["dac-42"]
    assert pool["acl"] == ["A::OWNER@:rw"]  # owner-only

    attached = {"7": ["node1", "node2"]}
    s.run(config, "daos", buf.model_copy(update={"attachments": attached}), "mount")
    calls = s.calls()
    assert site_paths(s, calls_as(calls, user.pw_uid)) == [
        ("user", n, "dfuse", f"--mountpoint={NODE.format(node=n)}", "--pool=dac-42",
         "--container=posix") for n in ("node1", "node2")]
    assert all(c["rc"] == 0 for c in calls)

    s.run(config, "daos", buf, "unmount", attached=attached)
    calls = s.calls()
    assert site_paths(s, calls_as(calls, user.pw_uid)) == [
        ("user", n, "fusermount3", "-u", NODE.format(node=n)) for n in ("node1", "node2")]
    assert all(c["rc"] == 0 for c in calls)
    assert not (s.root / "nodes" / "node1" / "7").exists()  # mount points and their parents

    s.run(config, "daos", buf, "delete")
    calls = s.calls()
    assert site_paths(s, calls_as(calls, user.pw_uid)) == [
        ("user", "dac1", "fusermount3", "-u", staging),
        ("root", "dac1", "dmg", "pool", "destroy", "--force", "--recursive", "dac-42")]
    assert all(c["rc"] == 0 for c in calls)
    assert s.state()["daos"]["pools"] == {} and not any(s.state()["daos"]["dfuse"].values())
    assert not (s.root / "dac1" / "fs" / "42").exists()


def test_four_hosts_pool_spans_the_ranks_of_its_bricks(site, user):
    s = site(4)
    config = s.config("daos")
    buf = s.buffer([("dac2", 0), ("dac1", 0), ("dac3", 0), ("dac4", 0)], uid=user.pw_uid,
                   gid=user.pw_gid)
    s.run(config, "daos", buf, "create")
    cmds = site_paths(s, calls_as(s.calls(), user.pw_uid))
    create = [c for c in cmds if c[2:5] == ("dmg", "pool", "create")]
    assert create == [("root", "dac2", "dmg", "pool", "create", f"--size={400 << 30}",
                       "--ranks=0,2,4,6", f"--user={user.pw_name}@",
                       f"--group={user.pw_name}@", "dac-42")]
    assert {c[1] for c in cmds} == {"dac2"}  # dmg and the staging dfuse: the primary only
    s.run(config, "daos", buf, "delete")
    assert s.state()["daos"]["pools"] == {}


def test_teardown_after_a_create_that_failed_half_way(site, user):
    s = site(2)
    config = s.config("daos")
    buf = s.buffer([("dac1", 0), ("dac2", 0)], uid=user.pw_uid, gid=user.pw_gid)
    s.fail("daos", ["container"], rc=1,
           stderr="ERROR: daos: failed to create container: DER_NOSPACE(-1007): No space")
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
        ("root", "dac1", "dmg", "pool", "destroy", "--force", "--recursive", "dac-42")]
    assert calls[-1]["rc"] == 0 and s.state()["daos"]["pools"] == {}

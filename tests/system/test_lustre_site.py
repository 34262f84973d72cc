"""The lustre backend's real playbooks, run by ansible-runner against the recorded-command site
(tests/site: strict stand-ins for parted, wipefs, udevadm, mkfs.lustre, mount, umount, lctl and
lfs), each following one Lustre release. Each test asserts the full ordered list of commands;
forks=1 makes the order exact. The one-host lifecycle and the io500 case run on every release;
the other cases on one each, so every release's stand-ins meet every playbook."""

import os

import pytest
from recorded_site import (
    LUSTRE_RELEASES,
    RecordedSite,
    closure,
    passable_only_to,
    reach,
)
from security.staging_dac import GID, OTHER_GID, OTHER_UID, UID

from daccore.backends.lustre import fsname, passable_to
from daccore.errors import PlaybookFailed

NODE = "<site>/nodes/{node}/7/{kind}"
OPTS = "flock,nodev,nosuid"
#: a server's staging mount of buffer 42, in a directory its owner alone may pass
BUFFER_DIR = "<site>/{host}/fs/42"
FS = BUFFER_DIR + "/mnt"
#: the buffers' owner in these tests: root's, 0700, that uid alone may pass
CLOSED = (0, "0o710", passable_only_to(1000))


def closing(host: str, *dirs: str) -> tuple:
    """The setfacl call that closes these directories to all but the buffers' owner."""
    return (host, "setfacl", "--set", passable_to(1000), *dirs)


@pytest.fixture
def site(tmp_path):
    return lambda hosts, bricks=2, release="2.15", **kw: RecordedSite(
        tmp_path / "site", hosts, bricks, release, **kw
    )


def ok(calls):
    """Every call was accepted, except stop.yml's cleanup of what is not there: umounts of
    what is not mounted, a shared MGS asked to forget a filesystem it never knew."""
    for c in calls:
        if c["rc"] != 0:  # erase_lcfg exits 1 on 2.15 and 2.16, ENOENT on master
            assert (c["argv"][0], c["rc"]) in (("umount", 32), ("lctl", 1), ("lctl", 2)), c
            assert c["argv"][0] == "umount" or c["argv"][1] == "erase_lcfg", c


@pytest.mark.parametrize("release", LUSTRE_RELEASES)
def test_one_host_striped_buffer_runs_exactly_these_commands(site, release):
    s = site(1, release=release)
    config = s.config("lustre")
    buf = s.buffer([("dac1", 0), ("dac1", 1)])
    fs = fsname(buf)
    d0, d1 = "<site>/dac1/dev/nvme0n1", "<site>/dac1/dev/nvme1n1"
    t = f"<site>/targets/{fs}"
    nid = "10.0.0.1@tcp"
    fs_path = FS.format(host="dac1")

    s.run(config, "lustre", buf, "create")
    calls = s.calls()
    ok(calls)
    assert s.commands_of(calls) == [
        ("dac1", "umount", fs_path),
        ("dac1", "umount", f"{t}/mdt0"),
        ("dac1", "umount", f"{t}/ost0"),
        ("dac1", "umount", f"{t}/ost1"),
        (
            "dac1",
            "parted",
            "--script",
            d0,
            "mklabel",
            "gpt",
            "mkpart",
            "mdt",
            "1MiB",
            "10241MiB",
            "mkpart",
            "ost",
            "10241MiB",
            "100%",
        ),
        ("dac1", "parted", "--script", d1, "mklabel", "gpt", "mkpart", "ost", "1MiB", "100%"),
        ("dac1", "udevadm", "settle"),
        (
            "dac1",
            "mkfs.lustre",
            "--mgs",
            "--mdt",
            "--reformat",
            f"--fsname={fs}",
            "--index=0",
            f"{d0}p1",
        ),
        (
            "dac1",
            "mkfs.lustre",
            "--ost",
            "--reformat",
            f"--fsname={fs}",
            "--index=0",
            f"--mgsnode={nid}",
            f"{d0}p2",
        ),
        (
            "dac1",
            "mkfs.lustre",
            "--ost",
            "--reformat",
            f"--fsname={fs}",
            "--index=1",
            f"--mgsnode={nid}",
            f"{d1}p1",
        ),
        ("dac1", "mount", "-t", "lustre", f"{d0}p1", f"{t}/mdt0"),
        ("dac1", "mount", "-t", "lustre", f"{d0}p2", f"{t}/ost0"),
        ("dac1", "mount", "-t", "lustre", f"{d1}p1", f"{t}/ost1"),
        closing("dac1", BUFFER_DIR.format(host="dac1")),
        ("dac1", "mount", "-t", "lustre", "-o", OPTS, f"{nid}:/{fs}", fs_path),
        ("dac1", "lfs", "setstripe", "-c", "-1", f"{fs_path}/striped"),
    ]
    striped = s.root / "dac1" / "fs" / "42" / "mnt" / "striped"
    assert (striped.stat().st_uid, oct(striped.stat().st_mode & 0o777)) == (1000, "0o700")
    # the mount point's parent: root's, 0700, its owner alone passes (issue 45)
    assert closure(s.root / "dac1" / "fs" / "42") == CLOSED

    attached = {"7": ["node1", "node2"]}
    s.run(config, "lustre", buf.model_copy(update={"attachments": attached}), "mount")
    calls = s.calls()
    ok(calls)
    assert s.commands_of(calls) == [
        closing(n, f"<site>/nodes/{n}/7") for n in ("node1", "node2")
    ] + [
        (
            n,
            "mount",
            "-t",
            "lustre",
            "-o",
            OPTS,
            f"{nid}:/{fs}/striped",
            NODE.format(node=n, kind="striped"),
        )
        for n in ("node1", "node2")
    ]
    for n in ("node1", "node2"):  # closed before anything was mounted in it
        assert closure(s.root / "nodes" / n / "7") == CLOSED
        assert closure(s.root / "nodes" / n)[:2] == (0, "0o711")  # passable, never listable

    s.run(config, "lustre", buf, "unmount", attached=attached)
    assert s.commands() == [
        (n, "umount", NODE.format(node=n, kind="striped")) for n in ("node1", "node2")
    ]
    assert not (s.root / "nodes" / "node1" / "7").exists()  # mount points and their parents

    s.run(config, "lustre", buf, "delete")
    calls = s.calls()
    assert all(c["rc"] == 0 for c in calls)
    assert s.commands_of(calls) == [
        ("dac1", "umount", fs_path),
        ("dac1", "umount", f"{t}/mdt0"),
        ("dac1", "umount", f"{t}/ost0"),
        ("dac1", "umount", f"{t}/ost1"),
        ("dac1", "wipefs", "--all", f"{d0}p1"),
        ("dac1", "wipefs", "--all", f"{d0}p2"),
        ("dac1", "wipefs", "--all", f"{d1}p1"),
        ("dac1", "wipefs", "--all", d0),
        ("dac1", "wipefs", "--all", d1),
    ]
    assert sorted(p.name for p in (s.root / "dac1" / "dev").iterdir()) == ["nvme0n1", "nvme1n1"]
    assert not (s.root / "dac1" / "fs" / "42").exists()  # the mount point and its parent
    assert not (s.root / "targets" / fs).exists()


# 4 hosts with a shared MGS and the tuning profile, on every release (the profile differs);
# 2 (enough to show the order across servers, and half the run time) with a per-buffer MGS
# and no tuning
@pytest.mark.parametrize(
    "hosts,mgs,tuning,release",
    [
        (2, "per_buffer", "none", "2.16"),
        *((4, "shared", "io500", release) for release in LUSTRE_RELEASES),
    ],
)
def test_multi_host_private_buffer_starts_and_stops_in_lustres_order(
    site, hosts, mgs, tuning, release
):
    s = site(hosts, release=release)
    shared = {"host": "mgs1", "nid": "10.0.0.100@tcp"}
    config = s.config("lustre", mgs=shared if mgs == "shared" else "per_buffer", tuning=tuning)
    servers = ["dac2", "dac1"] if hosts == 2 else ["dac3", "dac1", "dac2", "dac4"]
    bricks = [(h, b) for h in servers for b in (0, 1)]
    buf = s.buffer(bricks, access="striped,private")
    fs = fsname(buf)
    primary = servers[0]
    nid = "10.0.0.100@tcp" if mgs == "shared" else f"10.0.0.{primary[-1]}@tcp"
    t = f"<site>/targets/{fs}"

    if mgs == "shared":  # the site runs the shared MGS: it is up before any buffer
        s.start_shared_mgs("mgs1")
    s.run(config, "lustre", buf, "create")
    calls = s.calls()
    ok(calls)
    cmds = s.commands_of(calls)
    started = [c for c in cmds if c[1] == "mount"]
    # MGS (with MDT0, on the primary) first, then one MDT per server, then the 8 OSTs
    mgs_mount = [(h, c[-1].rsplit("/", 1)[1]) for h, *c in started]
    expected = (
        ([] if mgs == "shared" else [(primary, "mdt0")])
        + [(h, f"mdt{i}") for i, h in enumerate(servers) if mgs == "shared" or i > 0]
        + [(h, f"ost{2 * i + b}") for i, h in enumerate(servers) for b in (0, 1)]
        + [(h, "mnt") for h in servers]
    )
    assert mgs_mount == expected
    formats = [c for c in cmds if c[1] == "mkfs.lustre"]
    assert len(formats) == 3 * hosts  # an MDT and two OSTs per server
    assert all(f"--mgsnode={nid}" in c for c in formats if "--mgs" not in c)
    assert ("--mgs" in formats[0]) == (mgs == "per_buffer")
    # every server mounts the client at the primary's fs_path, where its dacd copies its share
    # of a split stage (issue 35); the primary alone makes the job's directories
    fs_path = FS.format(host=primary)
    client = [c for c in cmds if c[1] == "mount" and "-o" in c]
    assert client == [
        (h, "mount", "-t", "lustre", "-o", OPTS, f"{nid}:/{fs}", fs_path) for h in servers
    ]
    # each server's copier reaches fs_path as the job's user, and no other user does
    assert [c for c in cmds if c[1] == "setfacl"] == [
        closing(h, BUFFER_DIR.format(host=primary)) for h in servers
    ]
    assert closure(s.root / primary / "fs" / "42") == CLOSED
    assert [c[0] for c in cmds if c[1] == "lfs"] == [primary]
    assert servers_mounted(s, fs) == {h: [fs_path] for h in servers}
    if mgs == "shared":  # with a timeout: a cold o2ib peer may take longer than 1 s
        assert [c for c in cmds if c[1] == "lctl" and c[2] == "ping"] == [
            (h, "lctl", "ping", nid, "10") for h in servers
        ]
        assert ("mgs1", "lctl", "erase_lcfg", fs) in cmds  # create's clean start
    tuned = [c for c in cmds if c[1:3] == ("lctl", "set_param")]
    if tuning == "io500":  # each server's targets, then each server's client
        assert [c[0] for c in tuned] == servers + servers
        # the MDT's limit first where the release has one (2.16), before any client connects
        mdt = (f"mdt.{fs}-MDT*.max_mod_rpcs_in_flight=127",) if release == "2.16" else ()
        assert tuned[0][3:] == (
            *mdt,
            f"obdfilter.{fs}-OST*.brw_size=16",
            f"obdfilter.{fs}-OST*.precreate_batch=1024",
        )
        assert all(f"osc.{fs}-*.max_pages_per_rpc=4096" in c for c in tuned[hosts:])
        mod = "127" if release == "2.16" else "8"  # 2.15: the mdt module's default, 8
        assert all(f"mdc.{fs}-*.max_mod_rpcs_in_flight={mod}" in c for c in tuned[hosts:])
        assert all(
            c["rc"] == 0 and "error" not in c.get("stderr", "")
            for c in calls
            if c["argv"][:2] == ["lctl", "set_param"]
        )
    else:
        assert tuned == []

    attached = {"7": ["node1", "node2"]}
    s.run(config, "lustre", buf.model_copy(update={"attachments": attached}), "mount")
    calls = s.calls()
    ok(calls)
    mounts = [c for c in s.commands_of(calls) if c[1] == "mount"]
    assert mounts == [
        (
            n,
            "mount",
            "-t",
            "lustre",
            "-o",
            OPTS,
            f"{nid}:/{fs}/{part}",
            NODE.format(node=n, kind=kind),
        )
        for n in ("node1", "node2")
        for kind, part in (("private", f"private/{n}"), ("striped", "striped"))
    ]
    assert [c for c in s.commands_of(calls) if c[1] == "setfacl"] == [
        closing(n, f"<site>/nodes/{n}/7") for n in ("node1", "node2")
    ]
    top = s.root / primary / "fs" / "42" / "mnt"
    for n in ("node1", "node2"):
        d = top / "private" / n
        assert (d.stat().st_uid, oct(d.stat().st_mode & 0o777)) == (1000, "0o700")
        assert closure(s.root / "nodes" / n / "7") == CLOSED
    # no user may write where root makes each node's directory by name (docs/security.md)
    d = top / "private"
    assert (d.stat().st_uid, oct(d.stat().st_mode & 0o777)) == (0, "0o711")
    assert oct((top / "striped").stat().st_mode & 0o777) == "0o700"

    # teardown straight from mounted (the job was cancelled): clients, then the MDTs (MDT0
    # and a per-buffer MGS last of them), then the OSTs, as the Lustre manual stops them
    s.run(
        config,
        "lustre",
        buf.model_copy(update={"attachments": attached}),
        "delete",
        attached=attached,
    )
    calls = s.calls()
    assert all(c["rc"] == 0 for c in calls), calls
    order = [(c[0], c[-1].replace(f"{t}/", "")) for c in s.commands_of(calls) if c[1] == "umount"]
    assert order == [
        (n, NODE.format(node=n, kind=k)) for n in ("node1", "node2") for k in ("private", "striped")
    ] + [(h, fs_path) for h in servers] + [
        (h, f"mdt{i}") for i, h in enumerate(servers) if i > 0
    ] + [(primary, "mdt0")] + [
        (h, f"ost{2 * i + b}") for i, h in enumerate(servers) for b in (0, 1)
    ]
    mounted = {h: m for h, m in s.state().get("mounts", {}).items() if m}
    assert list(mounted) == (["mgs1"] if mgs == "shared" else [])  # the site's MGS stays up
    # every server's mount point and the directory above it went, and the nodes' job dirs
    assert not (s.root / primary / "fs" / "42").exists()
    assert not any((s.root / "nodes" / n / "7").exists() for n in ("node1", "node2"))


def servers_mounted(s, fs: str) -> dict[str, list[str]]:
    """Where each host has the whole filesystem `fs` mounted as a client (site paths as
    <site>), as its own mount table says."""
    out: dict[str, list[str]] = {}
    for h, entries in s.state().get("mounts", {}).items():
        for e in entries:
            if e.get("kind") == "client" and e["fsname"] == fs and not e["subdir"]:
                out.setdefault(h, []).append(e["dir"].replace(str(s.root), "<site>"))
    return out


def test_teardown_after_a_create_that_failed_half_way(site):
    s = site(2, release="2.16")
    config = s.config("lustre")
    buf = s.buffer([("dac1", 0), ("dac2", 0)])
    fs = fsname(buf)
    s.fail(
        "mount",
        ["ost1"],
        host="dac2",
        rc=5,
        stderr="mount.lustre: mount /dev/nvme0n1p2 at ost1 failed: Input/output error",
    )
    with pytest.raises(PlaybookFailed) as e:
        s.run(config, "lustre", buf, "create")
    assert e.value.host == "dac2" and e.value.task == "start the OSTs"
    assert "Input/output error" in str(e.value)
    s.calls()
    s.run(config, "lustre", buf, "delete")
    calls = s.calls()
    ok(calls)
    t = f"<site>/targets/{fs}"
    assert [c for c in s.commands_of(calls) if c[1] in ("umount", "wipefs")] == [
        ("dac1", "umount", FS.format(host="dac1")),
        ("dac2", "umount", FS.format(host="dac1")),
        ("dac2", "umount", f"{t}/mdt1"),
        ("dac1", "umount", f"{t}/mdt0"),
        ("dac1", "umount", f"{t}/ost0"),
        ("dac2", "umount", f"{t}/ost1"),
        ("dac1", "wipefs", "--all", "<site>/dac1/dev/nvme0n1p1"),
        ("dac1", "wipefs", "--all", "<site>/dac1/dev/nvme0n1p2"),
        ("dac2", "wipefs", "--all", "<site>/dac2/dev/nvme0n1p1"),
        ("dac2", "wipefs", "--all", "<site>/dac2/dev/nvme0n1p2"),
        ("dac1", "wipefs", "--all", "<site>/dac1/dev/nvme0n1"),
        ("dac2", "wipefs", "--all", "<site>/dac2/dev/nvme0n1"),
    ]
    # what was never mounted was skipped, not an error; what was mounted is stopped
    rcs = {(c["host"], *c["argv"][1:]): c["rc"] for c in calls if c["argv"][0] == "umount"}
    assert rcs[("dac2", f"{s.root}/targets/{fs}/ost1")] == 32
    fs_path = f"{s.root}/dac1/fs/42/mnt"
    assert rcs[("dac1", fs_path)] == rcs[("dac2", fs_path)] == 32
    assert rcs[("dac1", f"{s.root}/targets/{fs}/ost0")] == 0
    assert not any(s.state().get("mounts", {}).values())


def test_teardown_after_a_create_that_failed_at_a_servers_client_mount(site):
    """The primary's client is mounted, the other server's refused: the create stops there
    (the job's directories are never made) and the teardown unmounts the primary's client,
    skips the other server's, and leaves nothing mounted and no mount point behind."""
    s = site(2, release="2.15")
    config = s.config("lustre")
    buf = s.buffer([("dac1", 0), ("dac2", 0)])
    fs = fsname(buf)
    fs_path = f"{s.root}/dac1/fs/42/mnt"
    s.fail(
        "mount",
        ["-o", fs_path],
        host="dac2",
        rc=5,
        stderr=f"mount.lustre: mount {fs} at {fs_path} failed: Input/output error",
    )
    with pytest.raises(PlaybookFailed) as e:
        s.run(config, "lustre", buf, "create")
    assert (e.value.host, e.value.task) == ("dac2", "mount the filesystem")
    cmds = s.commands()
    shown = FS.format(host="dac1")
    assert [c for c in cmds if c[1] == "mount" and "-o" in c] == [
        (h, "mount", "-t", "lustre", "-o", OPTS, f"10.0.0.1@tcp:/{fs}", shown)
        for h in ("dac1", "dac2")
    ]
    assert not [c for c in cmds if c[1] == "lfs"]
    assert servers_mounted(s, fs) == {"dac1": [shown]}

    s.run(config, "lustre", buf, "delete")
    calls = s.calls()
    ok(calls)
    t = f"<site>/targets/{fs}"
    assert [c for c in s.commands_of(calls) if c[1] == "umount"] == [
        ("dac1", "umount", shown),
        ("dac2", "umount", shown),
        ("dac2", "umount", f"{t}/mdt1"),
        ("dac1", "umount", f"{t}/mdt0"),
        ("dac1", "umount", f"{t}/ost0"),
        ("dac2", "umount", f"{t}/ost1"),
    ]
    rcs = [(c["host"], c["rc"]) for c in calls if c["argv"] == ["umount", fs_path]]
    assert rcs == [("dac1", 0), ("dac2", 32)]  # the one never mounted is skipped, no error
    assert not any(s.state().get("mounts", {}).values())
    assert not os.path.lexists(os.path.dirname(fs_path))  # the mount point and its parent


def test_bricks_named_by_their_udev_links_get_udevs_partition_names(site):
    """/dev/disk/by-id/<id>: udev links its partitions as <id>-part<N> (the stand-in's parted
    makes them there), so mkfs.lustre and wipefs must be given those names."""
    s = site(1, bricks=2, by_id=True)
    config = s.config("lustre")
    buf = s.buffer([("dac1", 0), ("dac1", 1)])
    d0, d1 = "<site>/dac1/dev/disk/by-id/nvme-DAC_0", "<site>/dac1/dev/disk/by-id/nvme-DAC_1"
    s.run(config, "lustre", buf, "create")
    calls = s.calls()
    ok(calls)
    assert [c[-1] for c in s.commands_of(calls) if c[1] == "mkfs.lustre"] == [
        f"{d0}-part1",
        f"{d0}-part2",
        f"{d1}-part1",
    ]
    s.run(config, "lustre", buf, "delete")
    calls = s.calls()
    ok(calls)
    assert [c[-1] for c in s.commands_of(calls) if c[1] == "wipefs"] == [
        f"{d0}-part1",
        f"{d0}-part2",
        f"{d1}-part1",
        d0,
        d1,
    ]
    assert sorted(p.name for p in (s.root / "dac1" / "dev" / "disk" / "by-id").iterdir()) == [
        "nvme-DAC_0",
        "nvme-DAC_1",
    ]


def test_mdt0_starts_before_the_other_mdts_with_a_shared_mgs(site):
    """The manual's order: the MGS, MDT0, then the other MDTs. With a shared MGS MDT0 is an
    ordinary MDT, yet it starts on its own, and a failure there stops the start everywhere."""
    s = site(2, bricks=1, release="2.16")
    config = s.config("lustre", mgs={"host": "mgs1", "nid": "10.0.0.100@tcp"})
    buf = s.buffer([("dac1", 0), ("dac2", 0)])
    fs = fsname(buf)
    s.start_shared_mgs("mgs1")
    s.fail(
        "mount",
        [f"{fs}/mdt0"],
        host="dac1",
        rc=5,
        stderr="mount.lustre: mount at mdt0 failed: Input/output error",
    )
    with pytest.raises(PlaybookFailed) as e:
        s.run(config, "lustre", buf, "create")
    assert (e.value.host, e.value.task) == ("dac1", "start the MGS and MDT0")
    started = [c[-1].rsplit("/", 1)[1] for c in s.commands() if c[1] == "mount"]
    assert started == ["mdt0"]  # no other target was started


def test_no_other_user_reaches_a_lustre_buffers_mounts_on_nodes_or_servers(open_dir):
    """Issue 45: an O_PATH open needs no permission on its target, only search permission on
    the directories above it, so a user who could pass through another's job directory could
    hold that job's mount open (its unmount kept busy) and read its usage with statvfs. Every
    directory on the way to a buffer's mounts is root's, 0700, with an ACL letting the
    buffer's owner alone pass: on the node the job's directory and persistent/, on the server
    the staging mount's parent. The probes run as real users: the owner (uid 1234) reaches
    each mount as before, another (uid 5678) none. open_dir: a tree other users may enter up
    to the site, so a refusal is the job's or the buffer's directory's, not the test's."""
    s = RecordedSite(open_dir / "site", 1, 2, release="2.16")
    config = s.config("lustre", mgs={"host": "mgs1", "nid": "10.0.0.100@tcp"})
    s.start_shared_mgs("mgs1")
    job = {"7": ["node1"]}
    buf = s.buffer([("dac1", 0)], "striped,private", UID, GID, job)
    kept = s.buffer([("dac1", 1)], uid=UID, gid=GID, attachments=job, name="p1")
    kept = kept.model_copy(update={"persistent": True})
    for b in (buf, kept):
        s.run(config, "lustre", b, "create")
        s.run(config, "lustre", b, "mount")
    ok(s.calls())
    node, fs = s.root / "nodes" / "node1" / "7", s.root / "dac1" / "fs"
    for d in (node, node / "persistent", fs / "42", fs / "p1"):
        assert closure(d) == (0, "0o710", passable_only_to(UID)), d
    held = [node / "striped", node / "private", node / "persistent" / "p1"]
    held += [fs / "42" / "mnt", fs / "42" / "mnt" / "striped", fs / "p1" / "mnt"]
    for path in held:
        assert (reach(path, UID, GID), reach(path, OTHER_UID, OTHER_GID)) == ("ok", "EACCES")
    # the roots above stay passable to everyone (each job and copier reaches its own paths)
    for root in (node.parent, fs):
        assert reach(root, OTHER_UID, OTHER_GID) == "ok"

    for b in (kept, buf):
        s.run(config, "lustre", b, "delete", attached=job)
    ok(s.calls())
    assert not node.exists() and not (fs / "42").exists() and not (fs / "p1").exists()

"""Lustre and DAOS buffers driven through Slurm's calls by real dacd processes, on real etcd,
against the recorded-command site: the buffer's primary dacd runs each step once for all of
the buffer's hosts and records the state for each; the other dacd leaves the buffer alone."""

import itertools
import os
import subprocess
import sys
import time

import pytest
from clitools import pools, slurm, wait_for
from leftovers import LEFTOVER, account
from recorded_site import RecordedSite, closure, passable_only_to, reach
from security.staging_dac import GID, OTHER_GID, OTHER_UID, UID

from daccore.settings.config import load_config
from daccore.store import Store
from daclocal.slurm import ensure_submit_user

_prefixes = itertools.count()


@pytest.fixture
def site_dac(open_dir, etcd_server):
    started = []

    def boot(backend, **settings):
        # open_dir: DAOS's stand-ins also run as the job's user and must reach the site
        s = RecordedSite(open_dir / "site", 2, bricks_per_host=1)
        config = s.config(backend, etcd=etcd_server.settings(), **settings)
        config["etcd"]["prefix"] = f"/site{os.getpid()}-{next(_prefixes)}/"
        path = s.write_config(config)
        for host in s.hosts:
            started.append(s.start_dacd(path, host))
        env = {"DAC_CONFIG": str(path), "DAC_ETCD_ENDPOINTS": ""}
        wait_for(lambda: pools(env).get("p", {}).get("total_bricks") == 2, 30, "2 dacd up")
        return s, env, Store.from_settings(load_config(str(path), env={}).etcd)

    yield boot
    for proc in started:
        proc.terminate()
        proc.wait(30)


def job(tmp_path, token, line, nodes="node1\nnode2\n"):
    script = tmp_path / f"job{token}.sh"
    script.write_text(f"#!/bin/sh\n{line}\n")
    listed = tmp_path / f"nodes{token}"
    listed.write_text(nodes)
    return ["--job", str(script), "--nodehostnamefile", str(listed)]


def run_job(env, token, args, uid, gid=None):
    slurm(env, "job_process", token, "--job", args[1])
    slurm(
        env,
        "setup",
        token,
        "--caller",
        "SLURM",
        "--user",
        str(uid),
        "--groupid",
        str(uid if gid is None else gid),
        "--job",
        args[1],
    )
    slurm(env, "pre_run", token, *args)


def steps_logged(site, host):
    return (site.root / f"dacd-{host}.log").read_text().count(" on " + host)


def test_a_lustre_job_buffer_spans_both_servers_and_leaves_nothing(site_dac, tmp_path):
    site, env, store = site_dac("lustre")
    args = job(tmp_path, 5, "#DW jobdw capacity=200GiB access_mode=striped,private pool=p")
    run_job(env, 5, args, 1001)
    buf = store.buffer("5").record
    assert sorted(b.host for b in buf.allocation.bricks) == ["dac1", "dac2"]
    statuses = store.statuses("5")
    assert {h: s.state.value for h, s in statuses.items()} == {"dac1": "mounted", "dac2": "mounted"}
    cmds = site.commands()
    assert [c[0] for c in cmds if c[1] == "mkfs.lustre"] == ["dac1", "dac1", "dac2", "dac2"] or [
        c[0] for c in cmds if c[1] == "mkfs.lustre"
    ] == ["dac2", "dac2", "dac1", "dac1"]
    assert (
        sorted(c[0] for c in cmds if c[1] == "mount" and c[0].startswith("node"))
        == ["node1"] * 2 + ["node2"] * 2
    )  # striped and private on each node
    primary = buf.allocation.primary_host
    other = ({"dac1", "dac2"} - {primary}).pop()
    assert steps_logged(site, primary) >= 3 and steps_logged(site, other) == 0

    slurm(env, "post_run", 5, *args)
    slurm(env, "teardown", 5, "--job", args[1])
    assert store.buffer("5") is None and pools(env)["p"]["free_bricks"] == 2
    state = site.state()
    assert not any(state.get("mounts", {}).values())
    assert [c[0] for c in site.commands() if c[1] == "wipefs"] != []


def test_a_daos_job_buffer_is_a_pool_on_its_ranks_used_as_the_user(site_dac, tmp_path):
    user = ensure_submit_user()
    site, env, store = site_dac("daos")
    args = job(tmp_path, 6, "#DW jobdw capacity=200GiB access_mode=striped pool=p")
    r = slurm(
        env,
        "job_process",
        6,
        "--job",
        job(tmp_path, 60, "#DW jobdw capacity=100GiB access_mode=private pool=p")[1],
        check=False,
    )
    assert r.returncode == 1 and "the daos backend has no private mode" in r.stdout
    run_job(env, 6, args, user.pw_uid)
    calls = site.calls()
    create = next(c for c in calls if c["argv"][:3] == ["dmg", "pool", "create"])
    assert "--ranks=0,2" in create["argv"] and f"--user={user.pw_name}@" in create["argv"]
    as_user = [c for c in calls if c["argv"][0] in ("daos", "dfuse")]
    assert as_user and all(c["uid"] == user.pw_uid for c in as_user)
    assert sorted(c["host"] for c in as_user if c["argv"][0] == "dfuse") == sorted(
        [store.buffer("6").record.allocation.primary_host, "node1", "node2"]
    )

    slurm(env, "post_run", 6, *args)
    slurm(env, "teardown", 6, "--job", args[1])
    assert store.buffer("6") is None and pools(env)["p"]["free_bricks"] == 2
    destroyed = [c for c in site.calls() if c["argv"][:3] == ["dmg", "pool", "destroy"]]
    assert destroyed and destroyed[-1]["rc"] == 0


#: post_run and teardown together with a leftover holding a node's mount: two Slurm calls,
#: each a dacctl process and dacd's Ansible runs (a few seconds each on a loaded 2-core machine)
BOUND = 60


def leftover(path, uid, gid) -> int:
    """A job's leftover process on a node, its cwd in the node's mount of the buffer."""
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", LEFTOVER, "holder", str(path)],
        user=uid,
        group=gid,
        extra_groups=[gid],
        cwd="/",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    proc.stdout.close()
    proc.wait(timeout=10)
    assert line.strip().isdigit(), f"the leftover did not start in {path}"
    return int(line)


def ends_within_bound(env, token, args) -> None:
    """post_run and teardown, which end within BOUND although a leftover holds a node's mount."""
    t = time.monotonic()
    slurm(env, "post_run", token, *args)
    slurm(env, "teardown", token, "--job", args[1])
    assert time.monotonic() - t < BOUND
    assert pools(env)["p"]["free_bricks"] == 2


def kill(pid: int | None) -> None:
    if pid is not None:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


def test_a_lustre_leftover_on_a_node_is_detached_and_the_next_buffer_builds(site_dac, tmp_path):
    site, env, store = site_dac("lustre")
    args = job(tmp_path, 7, "#DW jobdw capacity=200GiB access_mode=striped pool=p", "node1\n")
    run_job(env, 7, args, UID, GID)
    # the job's directory on the node and the staging mount's parent on every server: root's,
    # 0700, passable by the job's user alone; no other user holds or measures the mounts
    primary = store.buffer("7").record.allocation.primary_host
    job_dir, buffer_dir = site.root / "nodes" / "node1" / "7", site.root / primary / "fs" / "7"
    for d in (job_dir, buffer_dir):
        assert closure(d) == (0, "0o710", passable_only_to(UID)), d
    for mount in (job_dir / "striped", buffer_dir / "mnt"):
        assert (reach(mount, UID, GID), reach(mount, OTHER_UID, OTHER_GID)) == ("ok", "EACCES")
    pid = None
    try:
        pid = leftover(site.root / "nodes" / "node1" / "7" / "striped", UID, GID)
        site.calls()
        ends_within_bound(env, 7, args)
        assert store.buffer("7") is None
        umounts = [c[2:] for c in site.commands() if c[0] == "node1" and c[1] == "umount"]
        assert umounts == [
            ("<site>/nodes/node1/7/striped",),
            ("--lazy", "<site>/nodes/node1/7/striped"),
        ], umounts
        state = site.state()
        assert not any(state.get("mounts", {}).values())
        assert [d["pids"] for d in state["lustre"]["detached"]] == [[pid]]
        held = os.readlink(f"/proc/{pid}/cwd")  # the detached view: no mount leads there

        args = job(tmp_path, 8, "#DW jobdw capacity=200GiB access_mode=striped pool=p", "node1\n")
        run_job(env, 8, args, OTHER_UID, OTHER_GID)
        node = site.root / "nodes" / "node1" / "8" / "striped"
        r = subprocess.run(
            ["sh", "-c", 'echo next > "$1"/f', "sh", str(node)],
            user=OTHER_UID,
            group=OTHER_GID,
            extra_groups=[],
            capture_output=True,
        )
        assert r.returncode == 0, r.stderr
        new_root = os.path.realpath(node)
        assert new_root != held and not os.path.exists(os.path.join(held, "f"))
        assert not any(
            held.startswith(os.path.realpath(e["root"]))
            for es in site.state()["mounts"].values()
            for e in es
            if "root" in e
        )
        slurm(env, "post_run", 8, *args)
        slurm(env, "teardown", 8, "--job", args[1])
        assert store.buffer("8") is None and pools(env)["p"]["free_bricks"] == 2
    finally:
        kill(pid)


def test_a_daos_leftover_on_a_node_is_detached_and_the_next_buffer_builds(site_dac, tmp_path):
    # DAOS names pool owners, so both users need names: the submit user and a second account
    # (tests/leftovers.py's account, made when the machine has none)
    user, other = ensure_submit_user(), account("dacother")
    site, env, store = site_dac("daos")
    # no node mount root yet: mount.yml makes it root's, 0711, and each job's directory
    # root's, 0700, passable by that job's user alone, so the second user's dfuse reaches its
    # own mount point and no other user reaches either
    assert not (site.root / "nodes" / "node1").exists()
    args = job(tmp_path, 9, "#DW jobdw capacity=200GiB access_mode=striped pool=p", "node1\n")
    run_job(env, 9, args, user.pw_uid, user.pw_gid)
    pid = None
    try:
        mount = site.root / "nodes" / "node1" / "9" / "striped"
        pid = leftover(mount, user.pw_uid, user.pw_gid)
        site.calls()
        ends_within_bound(env, 9, args)
        assert store.buffer("9") is None
        calls = site.calls()
        stops = [
            c["argv"][1:] for c in calls if c["host"] == "node1" and c["argv"][0] == "fusermount3"
        ]
        assert stops == [["-u", str(mount)], ["-u", "-z", str(mount)]], stops
        assert not any(site.state()["daos"]["dfuse"].values())
        assert [c["rc"] for c in calls if c["argv"][:3] == ["dmg", "pool", "destroy"]] == [0]
        held = os.readlink(f"/proc/{pid}/cwd")
        assert held == f"{mount} (deleted)"  # its mount point removed: no path leads there

        args = job(tmp_path, 10, "#DW jobdw capacity=200GiB access_mode=striped pool=p", "node1\n")
        run_job(env, 10, args, other.pw_uid, other.pw_gid)
        assert len(site.state()["daos"]["dfuse"]["node1"]) == 1
        root, job_dir = site.root / "nodes" / "node1", site.root / "nodes" / "node1" / "10"
        assert root.stat().st_uid == 0 and root.stat().st_mode & 0o011 == 0o011
        assert closure(job_dir) == (0, "0o710", passable_only_to(other.pw_uid))
        mount = job_dir / "striped"
        assert reach(mount, other.pw_uid, other.pw_gid) == "ok"
        assert reach(mount, user.pw_uid, user.pw_gid) == "EACCES"  # the first job's user
        slurm(env, "post_run", 10, *args)
        slurm(env, "teardown", 10, "--job", args[1])
        assert store.buffer("10") is None and pools(env)["p"]["free_bricks"] == 2
    finally:
        kill(pid)

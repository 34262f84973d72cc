"""A Lustre job buffer on a multi-host site, through Slurm's calls from the controller: every
command runs on the host it should, as recorded by the host itself."""

import json
import os
import signal
import threading
import time
from pathlib import Path

from clitools import pools, run, slurm, wait_for
from sshd import Sshd


def job(tmp_path, token, nodes=("node1", "node2")):
    script = tmp_path / f"job{token}.sh"
    script.write_text("#!/bin/sh\n#DW jobdw capacity=200GiB access_mode=striped,private pool=p\n")
    hostfile = tmp_path / f"nodes{token}"
    hostfile.write_text("".join(f"{n}\n" for n in nodes))
    return ["--job", str(script), "--nodehostnamefile", str(hostfile)]


def test_mh_a_job_buffer_is_built_on_both_servers_mounted_on_both_nodes_and_torn_down(mh, tmp_path):
    site, env, store = mh
    args = job(tmp_path, 101)
    slurm(env, "job_process", 101, "--job", args[1])
    slurm(
        env,
        "setup",
        101,
        "--caller",
        "SLURM",
        "--user",
        "1001",
        "--groupid",
        "1001",
        "--job",
        args[1],
    )
    slurm(env, "pre_run", 101, *args)
    calls = site.recorded.commands()
    buf = store.buffer("101").record
    primary = buf.allocation.primary_host
    assert sorted({c[0] for c in calls if c[1] == "mkfs.lustre"}) == ["srv1", "srv2"]
    node_mounts = sorted(c[0] for c in calls if c[1] == "mount" and c[0].startswith("node"))
    assert node_mounts == ["node1", "node1", "node2", "node2"]  # striped and private each
    assert [c[0] for c in calls if c[1] == "lfs"] == [primary]
    assert {c[0] for c in calls} == {"srv1", "srv2", "node1", "node2"}
    # each server mounts the buffer's client at the primary's fs_path, on its own host, where
    # its dacd copies its share of a split stage (issue 35), below <fs_root>/101/, which the
    # job's user alone may pass (issue 45)
    fs_path = f"{site.recorded.root}/{primary}/fs/101/mnt"
    shown = f"<site>/{primary}/fs/101/mnt"
    assert sorted(c[0] for c in calls if c[1] == "mount" and c[-1] == shown) == ["srv1", "srv2"]
    assert sorted(
        h
        for h, m in site.recorded.state()["mounts"].items()
        if any(e.get("kind") == "client" and e["dir"] == fs_path for e in m)
    ) == ["srv1", "srv2"]
    # one filesystem: what the job writes on node1's striped mount is read on node2's, and
    # each node's private mount is its own
    as_user(site, "node1", f"echo from node1 > {mount_of(site, 'node1', 101)}/shared")
    assert as_user(site, "node2", f"cat {mount_of(site, 'node2', 101)}/shared") == "from node1\n"
    as_user(site, "node1", f"echo mine > {mount_of(site, 'node1', 101, 'private')}/own")
    assert as_user(site, "node2", f"ls -A {mount_of(site, 'node2', 101, 'private')}") == ""

    slurm(env, "post_run", 101, *args)
    slurm(env, "teardown", 101, "--job", args[1])
    assert store.buffer("101") is None and pools(env)["p"]["free_bricks"] == 2
    assert not any(site.recorded.state().get("mounts", {}).values())
    unmounted = [c for c in site.recorded.calls() if c["argv"] == ["umount", fs_path]]
    assert sorted((c["host"], c["rc"]) for c in unmounted) == [("srv1", 0), ("srv2", 0)]
    assert not os.path.lexists(os.path.dirname(fs_path))  # every server's mount point went


def mount_of(site, node: str, token: int, kind: str = "striped") -> str:
    """Where `node` has the job's `kind` mount, as that node's mount table says."""
    (entry,) = [
        e for e in site.recorded.state()["mounts"][node] if e["dir"].endswith(f"/{token}/{kind}")
    ]
    return entry["dir"]


def as_user(site, node: str, script: str, uid: int = 1001) -> str:
    """Run `script` on `node` as the job's user; its output."""
    return (
        site.hosts[node]
        .run("setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sh", "-c", script)
        .stdout
    )


def nodes_mounted(site) -> list[str]:
    return sorted(
        h for h, m in site.recorded.state().get("mounts", {}).items() if m and h.startswith("node")
    )


def set_up(env, token, args):
    slurm(env, "job_process", token, "--job", args[1])
    slurm(
        env,
        "setup",
        token,
        "--caller",
        "SLURM",
        "--user",
        "1001",
        "--groupid",
        "1001",
        "--job",
        args[1],
    )


def timed(env, function, token, *args):
    started = time.monotonic()
    r = slurm(env, function, token, *args, check=False)
    return r, time.monotonic() - started


def test_mh_a_node_unreachable_at_pre_run_is_named_within_60s_and_the_job_ends_cleanly(
    mh, tmp_path
):
    site, env, store = mh
    args = job(tmp_path, 102)
    set_up(env, 102, args)
    site.hosts["node2"].link(up=False)
    try:
        r, took = timed(env, "pre_run", 102, *args)
    finally:
        site.hosts["node2"].link(up=True)
    line = r.stdout.strip()
    assert r.returncode != 0 and took < 60, (took, line)
    assert "node2 unreachable over ssh" in line and "an admin must bring node2 back" in line
    assert len(line.splitlines()) == 1 and "node1" not in line.split("(")[0]
    primary = store.buffer("102").record.allocation.primary_host
    # node2 never answered: it mounted nothing; node1 did, and is recorded
    assert store.statuses("102")[primary].attached == {"102": ["node1"]}
    assert nodes_mounted(site) == ["node1"]
    slurm(env, "post_run", 102, *args)
    assert nodes_mounted(site) == []
    slurm(env, "teardown", 102, "--job", args[1])
    assert store.buffer("102") is None and pools(env)["p"]["free_bricks"] == 2


def test_mh_a_node_lost_while_its_mount_runs_ends_pre_run_within_60s(mh, tmp_path):
    """node2's mount waits 8 s, and its link goes down as it starts: the command still runs
    there, the ssh session is given up by its keepalives (6 s), pre_run fails naming node2,
    and node2, having answered before, is recorded as attached, so post_run unmounts it."""
    site, env, store = mh
    args = job(tmp_path, 103)
    set_up(env, 103, args)
    started = site.slow("node2", "mount", 8)
    cut = threading.Thread(
        target=lambda: (
            wait_for(started.exists, 60, "node2's mount"),
            site.hosts["node2"].link(up=False),
        ),
        daemon=True,
    )
    cut.start()
    try:
        r, took = timed(env, "pre_run", 103, *args)
    finally:
        cut.join(60)
        site.slow("node2", "mount", None)
        site.hosts["node2"].link(up=True)
    line = r.stdout.strip()
    assert r.returncode != 0 and 6 <= took < 60, (took, line)
    assert "node2 unreachable over ssh" in line, line
    primary = store.buffer("103").record.allocation.primary_host
    assert store.statuses("103")[primary].attached == {"103": ["node1", "node2"]}
    wait_for(lambda: "node2" in nodes_mounted(site), 30, "node2's cut-off mount to finish")
    slurm(env, "post_run", 103, *args)
    assert nodes_mounted(site) == []
    slurm(env, "teardown", 103, "--job", args[1])
    assert store.buffer("103") is None and pools(env)["p"]["free_bricks"] == 2


def test_mh_a_node_dead_at_teardown_never_holds_the_bricks_and_owes_its_mounts(mh, tmp_path):
    """node1 is cut off after pre_run and stays so: teardown still completes on both servers
    and node2 within 60 s, and frees every brick; node1's two mounts are recorded as owed,
    shown by `dacctl owed`, and unmounted by the primary's dacd once node1 answers again. A
    second dead node is declared gone with `dacctl forget-node`."""
    site, env, store = mh
    args = job(tmp_path, 105)
    set_up(env, 105, args)
    slurm(env, "pre_run", 105, *args)
    site.hosts["node1"].link(up=False)
    try:
        r, took = timed(env, "teardown", 105, "--job", args[1])
        assert r.returncode == 0 and took < 60, (took, r.stdout)
        assert store.buffer("105") is None and pools(env)["p"]["free_bricks"] == 2
        assert not any(
            m for h, m in site.recorded.state().get("mounts", {}).items() if h.startswith("srv")
        )  # the filesystem is gone from every server
        assert nodes_mounted(site) == ["node1"]
        owed = run("dacctl", "owed", "--json", env=env).stdout
        (debt,) = json.loads(owed)["owed"]
        assert (debt["node"], debt["buffer"], len(debt["unmounts"])) == ("node1", "105", 2)
        assert run("dacctl", "owed", env=env).stdout.startswith("node1: buffer 105: 2 mounts")
    finally:
        site.hosts["node1"].link(up=True)
    wait_for(lambda: nodes_mounted(site) == [], 120, "node1's owed unmounts once it is back")
    wait_for(lambda: store.owed() == [], 30, "node1's debt dropped")

    # a node gone for good: an admin declares it so
    args = job(tmp_path, 106)
    set_up(env, 106, args)
    slurm(env, "pre_run", 106, *args)
    site.hosts["node2"].link(up=False)
    try:
        slurm(env, "teardown", 106, "--job", args[1])
        assert [o.node for o in store.owed()] == ["node2"]
        out = run("dacctl", "forget-node", "node2", env=env).stdout
        assert out.strip() == "node node2: 1 debts forgotten"
        assert store.owed() == []
    finally:
        site.hosts["node2"].link(up=True)
    # node2 came back with its mounts (the test's stand-in for a node that was not reinstalled)
    assert nodes_mounted(site) == ["node2"]
    for entry in list(site.recorded.state()["mounts"]["node2"]):  # its admin cleans it up
        site.hosts["node2"].run(str(site.bin / "umount"), entry["dir"])
    assert nodes_mounted(site) == []


def test_mh_a_node_unreachable_at_post_run_is_named_and_teardown_unmounts_it_once_back(
    mh, tmp_path
):
    site, env, store = mh
    args = job(tmp_path, 107)
    set_up(env, 107, args)
    slurm(env, "pre_run", 107, *args)
    site.hosts["node2"].link(up=False)
    try:
        r, took = timed(env, "post_run", 107, *args)
    finally:
        site.hosts["node2"].link(up=True)
    line = r.stdout.strip()
    assert r.returncode != 0 and took < 60, (took, line)
    assert "node2 unreachable over ssh" in line, line
    assert nodes_mounted(site) == ["node2"]  # node1's unmount went through
    primary = store.buffer("107").record.allocation.primary_host
    assert "node2" in store.statuses("107")[primary].attached["107"]  # still owed by the step
    slurm(env, "teardown", 107, "--job", args[1])
    assert store.buffer("107") is None and pools(env)["p"]["free_bricks"] == 2
    assert nodes_mounted(site) == [] and store.owed() == []


def test_mh_a_node_presenting_another_host_key_is_refused_and_runs_nothing(mh, tmp_path):
    """node2 re-installed (or an impostor at its address): its sshd has a new host key, which
    the admin's known_hosts does not list. Nothing runs there; the line says who acts."""
    site, env, store = mh
    node2 = site.hosts["node2"]
    args = job(tmp_path, 108)
    set_up(env, 108, args)
    assert node2.sshd is not None
    node2.sshd.stop()  # its sessions (and the servers' ssh masters to it) end with it
    impostor = Sshd(
        tmp_path / "sshd-new", Path(f"{site.key}.pub"), node2.address, 22, prefix=node2.enter
    ).start()
    site.recorded.calls()
    try:
        r = slurm(env, "pre_run", 108, *args, check=False)
        line = r.stdout.strip()
        assert (
            r.returncode != 0
            and "node2 unreachable over ssh (Host key verification failed.)" in line
        ), line
        assert f"put its current host key in {site.known_hosts}" in line
        assert [c for c in site.recorded.commands() if c[0] == "node2"] == []
    finally:
        impostor.stop()
        node2.sshd.start()
    slurm(env, "post_run", 108, *args)
    slurm(env, "teardown", 108, "--job", args[1])
    assert store.buffer("108") is None and pools(env)["p"]["free_bricks"] == 2
    assert nodes_mounted(site) == []


def test_mh_a_storage_server_down_at_create_fails_setup_within_60s_and_builds_nothing(mh, tmp_path):
    """A server cut off as setup is called, its lease not lapsed yet, so the allocation takes
    its brick: the primary's create finds it unreachable at its first play and stops there
    (any_errors_fatal); setup fails naming it and the remedy, nothing is left built on the
    primary, and once the server is back teardown frees both bricks and a new setup works."""
    site, env, store = mh
    args = job(tmp_path, 109)
    slurm(env, "job_process", 109, "--job", args[1])
    site.recorded.calls()
    # both dacds held still while setup allocates, so the cut comes before the create begins
    dacds = [site.dacds[s.name].pid for s in site.servers]
    outcome: list = []
    setup = threading.Thread(
        target=lambda: outcome.append(
            timed(
                env,
                "setup",
                109,
                "--caller",
                "SLURM",
                "--user",
                "1001",
                "--groupid",
                "1001",
                "--job",
                args[1],
            )
        )
    )
    for pid in dacds:
        os.kill(pid, signal.SIGSTOP)
    try:
        setup.start()
        # a stopped dacd's lease lapses 3.3-5 s on (lease_ttl 5, renewed every third of it)
        wait_for(
            lambda: store.buffer("109") is not None,
            3,
            "setup's allocation while the stopped dacds' leases still held",
        )
        primary = store.buffer("109").record.allocation.primary_host
        down = next(s for s in site.servers if s.name != primary)
        down.link(up=False)
    finally:
        for pid in dacds:
            os.kill(pid, signal.SIGCONT)
    try:
        setup.join(120)
        ((r, took),) = outcome
        line = r.stdout.strip()
        assert r.returncode != 0 and took < 60, (took, line)
        assert (
            len(line.splitlines()) == 1
            and f"create failed on {primary}: {down.name} unreachable over ssh" in line
        ), line
        assert (
            f"an admin must bring {down.name} back, or take it out of service (a storage "
            f"server: dacctl drain {down.name})" in line
        ), line
        calls = site.recorded.commands()
        assert not [c for c in calls if c[1] in ("mkfs.lustre", "mount")], calls
        assert not any(site.recorded.state().get("mounts", {}).values())
        # Slurm's teardown while the server is still away: named again, within the bound
        r, took = timed(env, "teardown", 109, "--job", args[1])
        assert r.returncode != 0 and took < 60 and f"{down.name} unreachable" in r.stdout, (
            took,
            r.stdout,
        )
        assert pools(env)["p"]["free_bricks"] == 0
    finally:
        down.link(up=True)
    wait_for(lambda: pools(env)["p"]["total_bricks"] == 2, 60, f"{down.name}'s dacd back")
    slurm(env, "teardown", 109, "--job", args[1])
    assert store.buffer("109") is None and pools(env)["p"]["free_bricks"] == 2
    args = job(tmp_path, 110)
    set_up(env, 110, args)
    assert sorted(store.buffer("110").record.allocation.hosts) == ["srv1", "srv2"]
    slurm(env, "teardown", 110, "--job", args[1])
    assert store.buffer("110") is None and pools(env)["p"]["free_bricks"] == 2


def test_mh_a_pre_run_that_failed_on_one_node_is_undone_and_the_requeued_job_runs_elsewhere(
    mh, tmp_path
):
    """node2's private mount fails after its striped one worked: pre_run fails naming node2,
    both nodes are recorded as attached (node2 holds a mount), post_run and teardown leave
    nothing; Slurm requeues the job (the same buffer name) onto node1 and node3, where
    setup, pre_run, post_run and teardown all work and node2 is never asked."""
    site, env, store = mh
    args = job(tmp_path, 111)
    set_up(env, 111, args)
    site.recorded.fail(
        "mount",
        ["/111/private"],
        host="node2",
        rc=5,
        stderr="mount.lustre: injected: Input/output error",
    )
    r, took = timed(env, "pre_run", 111, *args)
    line = r.stdout.strip()
    assert r.returncode != 0 and took < 60 and len(line.splitlines()) == 1, (took, line)
    assert (
        "mount failed on node2 at task" in line
        and "Input/output error; an admin must fix "
        "node2 or take it out of service (scontrol update nodename=node2 state=down)"
        in line
    )
    primary = store.buffer("111").record.allocation.primary_host
    assert store.statuses("111")[primary].attached == {"111": ["node1", "node2"]}
    assert nodes_mounted(site) == ["node1", "node2"]
    assert [e["dir"].rsplit("/", 1)[1] for e in site.recorded.state()["mounts"]["node2"]] == [
        "striped"
    ]
    slurm(env, "post_run", 111, *args)
    assert nodes_mounted(site) == []
    slurm(env, "teardown", 111, "--job", args[1])
    assert store.buffer("111") is None and pools(env)["p"]["free_bricks"] == 2

    # the requeue: Slurm stages the job in again and starts it on other nodes
    args = job(tmp_path, "111-requeued", nodes=("node1", "node3"))
    site.recorded.calls()
    slurm(
        env,
        "setup",
        111,
        "--caller",
        "SLURM",
        "--user",
        "1001",
        "--groupid",
        "1001",
        "--job",
        args[1],
    )
    slurm(env, "pre_run", 111, *args)
    primary = store.buffer("111").record.allocation.primary_host
    assert store.statuses("111")[primary].attached == {"111": ["node1", "node3"]}
    assert nodes_mounted(site) == ["node1", "node3"]
    as_user(site, "node3", f"echo again > {mount_of(site, 'node3', 111)}/out")
    assert as_user(site, "node1", f"cat {mount_of(site, 'node1', 111)}/out") == "again\n"
    slurm(env, "post_run", 111, *args)
    slurm(env, "teardown", 111, "--job", args[1])
    assert store.buffer("111") is None and pools(env)["p"]["free_bricks"] == 2
    assert nodes_mounted(site) == []
    assert not [c for c in site.recorded.commands() if c[0] == "node2"]

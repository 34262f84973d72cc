"""A Lustre job buffer on a multi-host site, through Slurm's calls from the controller: every
command runs on the host it should, as recorded by the host itself."""

import json
import threading
import time
from pathlib import Path

from clitools import pools, run, slurm, wait_for
from sshd import Sshd


def job(tmp_path, token, nodes=("node1", "node2")):
    script = tmp_path / f"job{token}.sh"
    script.write_text("#!/bin/sh\n#DW jobdw capacity=200GiB access_mode=striped,private "
                      "pool=p\n")
    hostfile = tmp_path / f"nodes{token}"
    hostfile.write_text("".join(f"{n}\n" for n in nodes))
    return ["--job", str(script), "--nodehostnamefile", str(hostfile)]


def test_mh_a_job_buffer_is_built_on_both_servers_mounted_on_both_nodes_and_torn_down(
        mh, tmp_path):
    site, env, store = mh
    args = job(tmp_path, 101)
    slurm(env, "job_process", 101, "--job", args[1])
    slurm(env, "setup", 101, "--caller", "SLURM", "--user", "1001", "--groupid", "1001",
          "--job", args[1])
    slurm(env, "pre_run", 101, *args)
    calls = site.recorded.commands()
    buf = store.buffer("101").record
    primary = buf.allocation.primary_host
    assert sorted({c[0] for c in calls if c[1] == "mkfs.lustre"}) == ["srv1", "srv2"]
    node_mounts = sorted(c[0] for c in calls if c[1] == "mount" and c[0].startswith("node"))
    assert node_mounts == ["node1", "node1", "node2", "node2"]  # striped and private each
    assert [c[0] for c in calls if c[1] == "lfs"] == [primary]
    assert {c[0] for c in calls} == {"srv1", "srv2", "node1", "node2"}

    slurm(env, "post_run", 101, *args)
    slurm(env, "teardown", 101, "--job", args[1])
    assert store.buffer("101") is None and pools(env)["p"]["free_bricks"] == 2
    assert not any(site.recorded.state().get("mounts", {}).values())


def nodes_mounted(site) -> list[str]:
    return sorted(h for h, m in site.recorded.state().get("mounts", {}).items()
                  if m and h.startswith("node"))


def set_up(env, token, args):
    slurm(env, "job_process", token, "--job", args[1])
    slurm(env, "setup", token, "--caller", "SLURM", "--user", "1001", "--groupid", "1001",
          "--job", args[1])


def timed(env, function, token, *args):
    started = time.monotonic()
    r = slurm(env, function, token, *args, check=False)
    return r, time.monotonic() - started


def test_mh_a_node_unreachable_at_pre_run_is_named_within_60s_and_the_job_ends_cleanly(
        mh, tmp_path):
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
    cut = threading.Thread(target=lambda: (wait_for(started.exists, 60, "node2's mount"),
                                           site.hosts["node2"].link(up=False)), daemon=True)
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
        assert not any(m for h, m in site.recorded.state().get("mounts", {}).items()
                       if h.startswith("srv"))  # the filesystem is gone from every server
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
        mh, tmp_path):
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
    impostor = Sshd(tmp_path / "sshd-new", Path(f"{site.key}.pub"), node2.address, 22,
                    prefix=node2.enter).start()
    site.recorded.calls()
    try:
        r = slurm(env, "pre_run", 108, *args, check=False)
        line = r.stdout.strip()
        assert r.returncode != 0 and "node2 unreachable over ssh (Host key verification " \
            "failed.)" in line, line
        assert f"put its current host key in {site.known_hosts}" in line
        assert [c for c in site.recorded.commands() if c[0] == "node2"] == []
    finally:
        impostor.stop()
        node2.sshd.start()
    slurm(env, "post_run", 108, *args)
    slurm(env, "teardown", 108, "--job", args[1])
    assert store.buffer("108") is None and pools(env)["p"]["free_bricks"] == 2
    assert nodes_mounted(site) == []

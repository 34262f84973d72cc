"""Lustre and DAOS buffers driven through Slurm's calls by real dacd processes, on real etcd,
against the recorded-command site: the buffer's primary dacd runs each step once for all of
the buffer's hosts and records the state for each; the other dacd leaves the buffer alone."""

import itertools
import os

import pytest
from clitools import pools, slurm, wait_for
from recorded_site import RecordedSite

from daccore.config import load_config
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


def job(tmp_path, token, line):
    script = tmp_path / f"job{token}.sh"
    script.write_text(f"#!/bin/sh\n{line}\n")
    nodes = tmp_path / f"nodes{token}"
    nodes.write_text("node1\nnode2\n")
    return ["--job", str(script), "--nodehostnamefile", str(nodes)]


def run_job(env, token, args, uid):
    slurm(env, "job_process", token, "--job", args[1])
    slurm(env, "setup", token, "--caller", "SLURM", "--user", str(uid), "--groupid", str(uid),
          "--job", args[1])
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
    assert {h: s.state.value for h, s in statuses.items()} == {"dac1": "mounted",
                                                              "dac2": "mounted"}
    cmds = site.commands()
    assert [c[0] for c in cmds if c[1] == "mkfs.lustre"] == ["dac1", "dac1", "dac2", "dac2"] \
        or [c[0] for c in cmds if c[1] == "mkfs.lustre"] == ["dac2", "dac2", "dac1", "dac1"]
    assert sorted(c[0] for c in cmds if c[1] == "mount" and c[0].startswith("node")) == \
        ["node1"] * 2 + ["node2"] * 2  # striped and private on each node
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
    r = slurm(env, "job_process", 6, "--job", job(tmp_path, 60, "#DW jobdw capacity=100GiB "
                                                   "access_mode=private pool=p")[1], check=False)
    assert r.returncode == 1 and "the daos backend has no private mode" in r.stdout
    run_job(env, 6, args, user.pw_uid)
    calls = site.calls()
    create = next(c for c in calls if c["argv"][:3] == ["dmg", "pool", "create"])
    assert "--ranks=0,2" in create["argv"] and f"--user={user.pw_name}@" in create["argv"]
    as_user = [c for c in calls if c["argv"][0] in ("daos", "dfuse")]
    assert as_user and all(c["uid"] == user.pw_uid for c in as_user)
    assert sorted(c["host"] for c in as_user if c["argv"][0] == "dfuse") == \
        sorted([store.buffer("6").record.allocation.primary_host, "node1", "node2"])

    slurm(env, "post_run", 6, *args)
    slurm(env, "teardown", 6, "--job", args[1])
    assert store.buffer("6") is None and pools(env)["p"]["free_bricks"] == 2
    destroyed = [c for c in site.calls() if c["argv"][:3] == ["dmg", "pool", "destroy"]]
    assert destroyed and destroyed[-1]["rc"] == 0

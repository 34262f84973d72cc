"""What a failed step leaves is what the next step undoes (issue 31), on Lustre buffers run by
real dacd processes on real etcd against the recorded-command site, through Slurm's calls:

- a pre_run that mounted on one node and failed on the other: every node that may have
  mounted is recorded as attached, so post_run unmounts it and teardown leaves nothing;
- a create that fails on one server stops everywhere (any_errors_fatal) and dacd removes what
  the other server built at once, before Slurm's teardown.
"""

import itertools
import os

import pytest
from clitools import pools, slurm, wait_for
from recorded_site import RecordedSite

from daccore.settings.config import load_config
from daccore.store import Store

_prefixes = itertools.count()


@pytest.fixture
def lustre_dac(open_dir, etcd_server):
    """Two servers of one brick each, a lustre pool, a dacd per server."""
    site = RecordedSite(open_dir / "site", 2, bricks_per_host=1, release="2.16")
    config = site.config("lustre", etcd=etcd_server.settings())
    config["etcd"]["prefix"] = f"/site{os.getpid()}-f{next(_prefixes)}/"
    path = site.write_config(config)
    started = [site.start_dacd(path, host) for host in site.hosts]
    env = {"DAC_CONFIG": str(path), "DAC_ETCD_ENDPOINTS": ""}
    try:
        wait_for(lambda: pools(env).get("p", {}).get("total_bricks") == 2, 30, "2 dacd up")
        yield site, env, Store.from_settings(load_config(str(path), env={}).etcd)
    finally:
        for proc in started:
            proc.terminate()
            proc.wait(30)


def job(tmp_path, token, nodes=("node1", "node2")):
    script = tmp_path / f"job{token}.sh"
    script.write_text("#!/bin/sh\n#DW jobdw capacity=200GiB access_mode=striped pool=p\n")
    hostfile = tmp_path / f"nodes{token}"
    hostfile.write_text("".join(f"{n}\n" for n in nodes))
    return ["--job", str(script), "--nodehostnamefile", str(hostfile)]


def mounted(site) -> dict:
    return {h: m for h, m in site.state().get("mounts", {}).items() if m}


def nodes_mounted(site) -> list[str]:
    return sorted(h for h in mounted(site) if h.startswith("node"))


def test_a_pre_run_that_mounted_one_node_and_failed_on_the_other_is_undone(lustre_dac, tmp_path):
    site, env, store = lustre_dac
    args = job(tmp_path, 31)
    slurm(env, "job_process", 31, "--job", args[1])
    slurm(
        env,
        "setup",
        31,
        "--caller",
        "SLURM",
        "--user",
        "1001",
        "--groupid",
        "1001",
        "--job",
        args[1],
    )
    site.calls()
    site.fail(
        "mount",
        ["/striped"],
        host="node2",
        rc=5,
        stderr="mount.lustre: mount at striped failed: Input/output error",
    )
    r = slurm(env, "pre_run", 31, *args, check=False)
    assert r.returncode != 0 and "mount failed on" in r.stdout and "node2" in r.stdout
    assert "Input/output error" in r.stdout and len(r.stdout.strip().splitlines()) == 1
    assert nodes_mounted(site) == ["node1"]
    # both nodes may have mounted: both are recorded, whatever the step's outcome
    primary = store.buffer("31").record.allocation.primary_host
    assert store.statuses("31")[primary].attached == {"31": ["node1", "node2"]}

    slurm(env, "post_run", 31, *args)
    assert nodes_mounted(site) == []  # post_run unmounted what the failed pre_run left
    assert store.statuses("31")[primary].attached == {}
    slurm(env, "teardown", 31, "--job", args[1])
    assert store.buffer("31") is None and pools(env)["p"]["free_bricks"] == 2
    assert mounted(site) == {}


def test_a_create_that_fails_on_one_server_stops_everywhere_and_removes_what_was_built(
    lustre_dac, tmp_path
):
    site, env, store = lustre_dac
    args = job(tmp_path, 32)
    slurm(env, "job_process", 32, "--job", args[1])
    site.fail(
        "mkfs.lustre",
        ["--ost"],
        host="dac2",
        rc=22,
        stderr="mkfs.lustre: injected: Invalid argument",
    )
    r = slurm(
        env,
        "setup",
        32,
        "--caller",
        "SLURM",
        "--user",
        "1001",
        "--groupid",
        "1001",
        "--job",
        args[1],
        check=False,
    )
    assert r.returncode != 0 and "create failed on dac2 at task 'format the targets'" in r.stdout
    calls = site.commands()
    failed_at = next(
        i for i, c in enumerate(calls) if c[0] == "dac2" and c[1] == "mkfs.lustre" and "--ost" in c
    )
    # no target started anywhere, no client mounted: the create stopped at the failure
    assert not [c for c in calls if c[1] == "mount"]
    # and what was formatted is wiped before Slurm's teardown (dacd ran delete.yml)
    wiped = [c for c in calls[failed_at:] if c[1] == "wipefs"]
    assert {c[0] for c in wiped} == {"dac1", "dac2"}
    assert mounted(site) == {}
    slurm(env, "teardown", 32, "--job", args[1])
    assert store.buffer("32") is None and pools(env)["p"]["free_bricks"] == 2

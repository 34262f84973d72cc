"""dacd's /metrics, scraped over HTTP from a local DAC's real dacd processes while buffers go
through the Slurm protocol: real playbooks, a real failing mkfs, a real copy."""

import json
import os
import urllib.request

from clitools import pools, run, setup, slurm, wait_for
from prometheus_client.parser import text_string_to_metric_families

UID, GID = 1234, 4321  # the job's user, as clitools.setup asks


def addresses(workdir):
    """host -> metrics address, as `dacctl local status` reports them."""
    status = json.loads(
        run("dacctl", "local", "status", "--workdir", str(workdir), "--json").stdout
    )
    return {d["host"]: d["metrics"] for d in status["dacd"]}


def scrape(address):
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(scrapes, name, **labels):
    """`name` summed over every dacd's series that carry `labels`."""
    want = set(labels.items())
    return sum(
        v for scraped in scrapes for (n, have), v in scraped.items() if n == name and want <= have
    )


def scrape_all(workdir):
    return [scrape(a) for a in addresses(workdir).values()]


def assert_bricks_match_pools(workdir, env):
    scrapes, p = scrape_all(workdir), pools(env)["default"]
    assert (
        total(scrapes, "dac_pool_bricks", pool="default"),
        total(scrapes, "dac_pool_bricks_free", pool="default"),
        total(scrapes, "dac_pool_bricks_used", pool="default"),
    ) == (p["total_bricks"], p["free_bricks"], p["used_bricks"])
    return p


def steps(workdir, step):
    return total(scrape_all(workdir), "dac_step_duration_seconds_count", step=step, backend="local")


def test_metrics_follow_a_buffer_through_setup_staging_and_teardown(dac, open_dir, tmp_path):
    workdir, env, store = dac
    where = addresses(workdir)
    assert sorted(where) == ["dac-server-1", "dac-server-2"]
    assert (
        all(a.startswith("127.0.0.1:") for a in where.values()) and len(set(where.values())) == 2
    )  # one port per dacd, though they share one config
    assert assert_bricks_match_pools(workdir, env)["free_bricks"] == 4
    assert total(scrape_all(workdir), "dac_host_alive") == 2
    before = {step: steps(workdir, step) for step in ("create", "stage_in", "delete")}

    src, out = open_dir / "in", open_dir / "out"
    for d in (src, out):
        d.mkdir()
        os.chown(d, UID, GID)
    for name, data in (("a", b"a" * 1000), ("b", os.urandom(3 << 20))):
        (src / name).write_bytes(data)
        os.chown(src / name, UID, GID)
    script = setup(
        env,
        tmp_path,
        61,
        "512MiB",
        f"#DW stage_in type=directory source={src} destination=$DW_JOB_STRIPED/in",
        f"#DW stage_out type=directory source=$DW_JOB_STRIPED/in destination={out}/r",
    )
    host = store.buffer("61").record.allocation.primary_host
    assert assert_bricks_match_pools(workdir, env)["used_bricks"] == 1
    primary = scrape(where[host])
    assert total([primary], "dac_buffers", host=host, state="created") == 1
    assert total(scrape_all(workdir), "dac_buffers") == 1  # counted by its primary only
    assert steps(workdir, "create") == before["create"] + 1

    copied = total([primary], "dac_stage_bytes_total", direction="in")
    files = total([primary], "dac_stage_files_total", direction="in")
    slurm(env, "data_in", 61, "--job", str(script))
    primary = scrape(where[host])
    assert total([primary], "dac_stage_bytes_total", direction="in") == copied + 1000 + (3 << 20)
    assert total([primary], "dac_stage_files_total", direction="in") == files + 2
    assert total([primary], "dac_stage_last_bytes_per_second", direction="in") > 0
    assert total([primary], "dac_buffers", state="staged_in") == 1
    assert steps(workdir, "stage_in") == before["stage_in"] + 1
    slurm(env, "data_out", 61, "--job", str(script))
    assert total([scrape(where[host])], "dac_stage_bytes_total", direction="out") >= 1000 + (
        3 << 20
    )

    slurm(env, "teardown", 61, "--job", str(script))
    assert steps(workdir, "delete") == before["delete"] + 1
    wait_for(
        lambda: total(scrape_all(workdir), "dac_buffers") == 0,
        timeout=30,
        what="the reaped buffer to leave dac_buffers",
    )
    assert assert_bricks_match_pools(workdir, env)["free_bricks"] == 4
    assert total(scrape_all(workdir), "dac_step_failures_total") == 0


def test_a_failing_create_counts_a_step_and_a_playbook_failure(open_dir, tmp_path):
    workdir = open_dir / "small"
    run(
        "dacctl",
        "local",
        "up",
        "--workdir",
        str(workdir),
        "--servers",
        "1",
        "--bricks-per-server",
        "1",
        "--brick-size",
        "200MiB",
    )  # too small for mkfs.xfs
    try:
        env = {"DAC_CONFIG": str(workdir / "dac.yaml"), "DAC_ETCD_ENDPOINTS": ""}
        (address,) = addresses(workdir).values()
        labels = {"step": "create", "backend": "local"}
        before = scrape(address)
        assert total([before], "dac_step_failures_total", category="admin", **labels) == 0
        script = tmp_path / "job.sh"
        script.write_text("#!/bin/sh\n#DW jobdw capacity=100MiB pool=default\n")
        r = run(
            "dacctl",
            "--function",
            "setup",
            "--token",
            "9",
            "--caller",
            "SLURM",
            "--user",
            "1234",
            "--groupid",
            "4321",
            "--job",
            str(script),
            env=env,
            check=False,
        )
        assert r.returncode == 1 and "mkfs.xfs" in r.stdout
        after = scrape(address)
        assert total([after], "dac_step_failures_total", category="admin", **labels) == 1
        assert total([after], "dac_step_failures_total", category="user", **labels) == 0
        assert total([after], "dac_playbook_failures_total", **labels) == 1
        assert (
            total([after], "dac_step_duration_seconds_count", **labels)
            == total([before], "dac_step_duration_seconds_count", **labels) + 1
        )
        assert total([after], "dac_buffers", state="failed") == 1
        assert total([after], "dac_pool_bricks_used", pool="default") == 1
        run("dacctl", "--function", "teardown", "--token", "9", "--job", str(script), env=env)
        wait_for(
            lambda: total([scrape(address)], "dac_buffers") == 0,
            timeout=30,
            what="the torn-down buffer to leave dac_buffers",
        )
        assert total([scrape(address)], "dac_step_duration_seconds_count", step="delete") == 1
    finally:
        run("dacctl", "local", "down", "--workdir", str(workdir), check=False)

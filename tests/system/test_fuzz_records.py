"""Fuzzing what dacd reads from etcd (issue 19): malformed and wrongly typed records
(tests/fuzzgen.py: not JSON, not UTF-8, not an object, each field missing, of another type,
huge, hostile) under every key prefix of daccore/records/keys.py, under odd key names too, written
straight into etcd while real dacds run, and one dacd restarted among them. Each dacd logs a
bad buffer or status it meets and skips it, writes no traceback, stays up, serves /metrics, and
builds and tears down a good buffer afterwards; the admin commands and Slurm's hooks answer
without a traceback, one line when they fail.

tests/security/test_dacdtrust_records.py covers the buffer records an attacker would write
(root owner, another disk, Jinja, huge capacity, a few unreadable ones); this covers every
other prefix and, for buffers, every field of the record with every wrong type.

The seed is printed; `DAC_FUZZ_SEED=<n>` runs another set."""

import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from clitools import pools, setup, slurm, wait_for
from fuzzgen import ODD_NAMES, bad_values, cli_fault, seed, summary
from fuzzrun import in_process, local_dac

from daccore.escape import printable
from daccore.settings.config import load_config
from daccore.store import Store

HOSTS = ("dac-server-1", "dac-server-2")


@pytest.fixture(scope="module")
def records_dac():
    with local_dac() as (workdir, env):
        yield workdir, env, Store.from_settings(load_config(env["DAC_CONFIG"], env={}).etcd)


def templates(store, env, tmp_path):
    """A good record of each kind, read from etcd while a real job's buffer exists; the
    buffer is torn down again."""
    setup(env, tmp_path, 900, "512MiB")
    k, get = store.keys, (lambda key: json.loads(store.client.get(key).value))
    claim = store.client.range(k.claims, k.claims[:-1] + "0")[0][0]
    host = store.buffer("900").record.allocation.primary_host
    out = {
        "pools": get(k.pool("default")),
        "hosts": get(k.host(host)),
        "capacity": get(k.capacity(host)),
        "claims": json.loads(claim.value),
        "buffers": get(k.buffer("900")),
        "status": get(k.status("900", host)),
    }
    out["intents"] = out["buffers"]
    slurm(env, "teardown", 900)
    return out


def bad_records(rng, store, good):
    """(key, value) of every bad record: each prefix under fresh and odd names; buffers with a
    claim on a real host's brick naming them, so that host's dacd reads them; statuses of such
    a buffer; claims, intents and their leases (none: the intent's call is gone)."""
    k = store.keys
    out = []
    for prefix, template in good.items():
        values = bad_values(rng, template)
        names = [f"fz-{prefix}-{i}" for i in range(len(values))]
        names[: len(ODD_NAMES)] = ODD_NAMES
        for i, (name, value) in enumerate(zip(names, values, strict=True)):
            host = HOSTS[i % 2]
            if prefix == "buffers":  # the spec, then its claim: a dacd is woken by the claim
                name = f"fz{i}"  # (or by a spec's work key, which no forger writes here)
                out.append((k.buffers + name, value))
                out.append(
                    (
                        k.claim("default", host, f"fz-brick-{i}"),
                        json.dumps({"buffer": name}).encode(),
                    )
                )
                continue
            if prefix == "status":
                out.append((k.status(f"fz{i % 7}", name), value))
                continue
            elif prefix == "claims":
                out.append((k.claim("default", host, name), value))
                continue
            out.append(
                (
                    getattr(
                        k,
                        {
                            "pools": "pools",
                            "hosts": "hosts",
                            "capacity": "capacities",
                            "buffers": "buffers",
                            "intents": "intents",
                        }[prefix],
                    )
                    + name,
                    value,
                )
            )
    out += [(k.alive + name, b"\xff") for name in ODD_NAMES]
    out += [(k.mgs_slots + name, b"{") for name in ODD_NAMES]
    out += [(k.intent_leases + "fz-orphan", b"")]
    return out


def restart_dacd(workdir, env, host, log="restarted"):
    """SIGTERM `host`'s dacd, if the local DAC's still runs, and start it again, as systemd
    would; its log is its own, logs/dacd-<host>-<log>.log."""
    dacd = next(
        d for d in json.loads((workdir / "state.json").read_text())["dacd"] if d["host"] == host
    )
    try:
        os.kill(dacd["pid"], signal.SIGTERM)
    except ProcessLookupError:  # stopped by an earlier test
        pass
    wait_for(lambda: not os.path.exists(f"/proc/{dacd['pid']}"), 30, "the dacd to stop")
    log = open(workdir / "logs" / f"dacd-{host}-{log}.log", "ab")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dacd.main",
            "--config",
            env["DAC_CONFIG"],
            "--host",
            host,
            "--metrics-address",
            dacd["metrics"],
        ],
        stdout=log,
        stderr=log,
        env={
            k: v
            for k, v in os.environ.items()
            if k not in ("DAC_ETCD_ENDPOINTS", "ETCDCTL_ENDPOINTS")
        },
    )


def is_claim(value: bytes) -> bool:
    """What dacd takes for a brick claim: a JSON object naming its buffer."""
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and isinstance(doc.get("buffer"), str)


def logs(workdir):
    return {p.name: p.read_text(errors="replace") for p in (workdir / "logs").glob("dacd-*.log")}


def admin_answers(env, names):
    """Each admin command and Slurm hook that reads what was written: its fault, if any."""
    argvs = [
        ["pools"],
        ["pools", "--json"],
        ["hosts"],
        ["hosts", "--json"],
        ["buffers"],
        ["buffers", "--json"],
        ["--function", "pools"],
        ["--function", "show_instances"],
        ["--function", "show_sessions"],
        ["--function", "real_size", "--token", "7"],
    ]
    argvs += [[verb, name] for name in names for verb in ("show", "status")]
    faults = []
    for argv in argvs:
        rc, out, err = in_process(argv, env)
        fault = cli_fault(argv, rc, out, err)
        if fault:
            faults.append(f"{fault}\nargs: {[a[:60] for a in argv]}\nerr: {err[-800:]}")
    return faults


def test_bad_records_under_every_key_are_skipped_and_dacd_goes_on(records_dac, tmp_path, capsys):
    workdir, env, store = records_dac
    s = seed()
    good = templates(store, env, tmp_path)
    records = bad_records(random.Random(s), store, good)
    started = time.monotonic()
    for key, value in records:
        store.client.put(key, value)
    restarted = restart_dacd(workdir, env, "dac-server-1")
    try:
        # the restarted dacd came up through the bad pools, hosts and intents, and each dacd
        # logged every bad buffer whose claim names its host, once
        log = "dacd-dac-server-1-restarted.log"
        wait_for(
            lambda: restarted.poll() is None and "registered" in logs(workdir).get(log, ""),
            timeout=60,
            what=f"the restarted dacd to register: {logs(workdir).get(log)}",
        )
        buffers = {
            key.rsplit("/", 1)[1]: key.split("/")[-2]
            for key, value in records
            if key.startswith(store.keys.claims) and value.startswith(b'{"buffer": "fz')
        }
        for name, host in buffers.items():
            wait_for(
                lambda name=name, host=host: any(
                    f"skipping {store.keys.buffer(json.loads(v)['buffer'])}" in text
                    for log, text in logs(workdir).items()
                    if host in log
                    for k, v in records
                    if k.endswith("/" + name)
                ),
                timeout=60,
                what=f"{host}'s dacd to skip the buffer its claim {name} names",
            )
        # and every record under its claim keys that is no claim, once
        under = store.keys.claims + "default/"
        no_claims = [key for key, value in records if key.startswith(under) and not is_claim(value)]
        for key in no_claims:
            host = key[len(under) :].split("/", 1)[0]
            wait_for(
                lambda key=key, host=host: any(
                    f"skipping {printable(key)}: not a brick claim" in text
                    for log, text in logs(workdir).items()
                    if host in log
                ),
                timeout=60,
                what=f"{host}'s dacd to skip {printable(key)}, no claim",
            )
        faults = admin_answers(env, [*ODD_NAMES, "fz3", "fz-buffers-20"])
        scraped = [
            urllib.request.urlopen(f"http://{d['metrics']}/metrics", timeout=10).status
            for d in json.loads((workdir / "state.json").read_text())["dacd"]
        ]
        # the claims on the real hosts go (they count as used bricks); the other records stay
        for key, _ in records:
            if key.startswith(store.keys.claims):
                store.client.delete(key)
        setup(env, tmp_path, 901, "1GiB")
        slurm(env, "teardown", 901)
        took = time.monotonic() - started
        with capsys.disabled():
            print(
                f"\nfuzz seed {s}: {len(records)} bad records under {len(good) + 3} prefixes, "
                f"{len(buffers)} buffers and {len(no_claims)} claims skipped, "
                f"{len(faults)} faults, {took:.1f} s"
            )
        assert not faults, summary(faults)
        assert no_claims
        assert scraped == [200, 200]
        assert pools(env)["default"]["free_bricks"] == 4
        assert restarted.poll() is None
        text = logs(workdir)
        assert not [log for log, t in text.items() if "Traceback" in t], {
            log: t[t.index("Traceback") - 300 :][:3000]
            for log, t in text.items()
            if "Traceback" in t
        }
    finally:
        restarted.terminate()
        restarted.wait(30)
        for key, _ in records:
            store.client.delete(key)


@pytest.mark.parametrize("kind", ["Host", "Pool"])
def test_a_dacd_whose_own_host_or_pool_record_is_bad_refuses_to_start_in_one_line(
    records_dac, kind
):
    """dacd never overwrites its own hosts/<host> record, nor its pool's pools/<pool>, when it
    is not one dac wrote (an admin's drained flag would be lost; a pool record is written once):
    it refuses to start, in one line naming the key, and starts once the record is sane again."""
    workdir, env, store = records_dac
    key, bad = {
        "Host": (store.keys.host("dac-server-1"), b'{"name": "dac-server-1", "bricks": 7}'),
        "Pool": (store.keys.pool("default"), b'{"name": "default", "granularity": []}'),
    }[kind]
    good = store.client.get(key).value
    store.client.put(key, bad)
    try:
        refused = restart_dacd(workdir, env, "dac-server-1", f"bad-{kind}")
        rc = refused.wait(60)
    finally:
        store.client.put(key, good)
    out = (workdir / "logs" / f"dacd-dac-server-1-bad-{kind}.log").read_text()  # log + stderr
    said = [line for line in out.splitlines() if not line.startswith("20")]  # not a log line
    assert rc == 2 and len(said) == 1 and "Traceback" not in out, out
    assert said[0].startswith(f"dacd: admin error: record at {key} is not a valid {kind}: "), out
    assert said[0].endswith("; an admin must fix or delete it"), out
    assert store.client.get(key).value == good  # left as it was
    again = restart_dacd(workdir, env, "dac-server-1", f"good-{kind}")
    try:
        wait_for(
            lambda: (
                "registered"
                in (workdir / "logs" / f"dacd-dac-server-1-good-{kind}.log").read_text()
            ),
            timeout=60,
            what="dacd to start on the sane record",
        )
        assert again.poll() is None
    finally:
        again.terminate()
        again.wait(30)

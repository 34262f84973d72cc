"""Fuzzing at the issue's scale (issue 19): the generators of tests/fuzzgen.py, as
tests/system/test_fuzz_*.py run them in `make test`, but 10,000 job scripts through
job_process in process and 500 through the `dacctl` command, 5,000 dacctl command lines in
process and 200 as commands, and the bad etcd records of five seeds (1,725) while real dacds
run. Budget: no fault at all (a traceback, an internal error, more than one line, a refusal
naming no line); the counts and times are printed.

    .venv/bin/python bench/fuzz.py          (DAC_FUZZ_SEED=<n> for another set; needs root)
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "system")]
from fuzzgen import (  # noqa: E402
    cli_args,
    cli_fault,
    function_args,
    job_process_fault,
    job_scripts,
    seed,
    summary,
)
from fuzzrun import as_process, in_process, local_dac, make_scratch  # noqa: E402

SCRIPTS, SCRIPTS_AS_PROCESS = 10_000, 500
COMMANDS, COMMANDS_AS_PROCESS = 5_000, 200
RECORD_SEEDS = 5
HOSTS = {"dac-server-1", "dac-server-2"}


def run_all(run_one, argvs, env, workers=1, scripts=None, directory=None):
    """Faults of each command line; with `scripts`, each is written to a file first."""

    def one(i):
        argv = argvs[i]
        if scripts is not None:
            path = directory / f"job{i}.sh"  # one per worker could be rewritten mid-answer
            path.write_bytes(scripts[i])
            argv = [*argv, str(path)]
        rc, out, err = run_one(argv, env)
        fault = (
            job_process_fault(scripts[i], rc, out, err)
            if scripts is not None
            else cli_fault(argv, rc, out, err)
        )
        return fault and f"{fault}\nargs: {[a[:80] for a in argv]}", rc

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, range(len(argvs))))


def report(label, results, started) -> list[str]:
    faults = [f for f, _ in results if f]
    accepted = sum(rc == 0 for _, rc in results)
    print(
        f"{label}: {len(results)} ({accepted} exit 0, {len(results) - accepted} refused), "
        f"{len(faults)} faults, {time.monotonic() - started:.1f} s"
    )
    return faults


def job_process(env, work, s) -> list[str]:
    faults = []
    for label, run_one, n, workers, sd in (
        ("job scripts in process", in_process, SCRIPTS, 1, s),
        ("job scripts as commands", as_process, SCRIPTS_AS_PROCESS, os.cpu_count() or 2, s + 1),
    ):
        scripts = job_scripts(random.Random(sd), n)
        started = time.monotonic()
        results = run_all(
            run_one, [["--function", "job_process", "--job"]] * n, env, workers, scripts, work
        )
        faults += report(label, results, started)
    return faults


def commands(env, scratch, s) -> list[str]:
    faults = []
    for label, run_one, n, workers, sd in (
        ("command lines in process", in_process, COMMANDS, 1, s),
        ("command lines as commands", as_process, COMMANDS_AS_PROCESS, os.cpu_count() or 2, s + 1),
    ):
        rng = random.Random(sd)
        argvs = [
            cli_args(rng, scratch, HOSTS) if i % 2 else function_args(rng, scratch)
            for i in range(n)
        ]
        started = time.monotonic()
        faults += report(label, run_all(run_one, argvs, env, workers), started)
    return faults


def records(workdir, env, s) -> list[str]:
    """The records test's bad records for several seeds, all in etcd at once; then the admin
    commands, a good buffer's setup and teardown, and no traceback in any dacd's log."""
    from clitools import setup, slurm

    # tests/system is on sys.path (above), not on mypy's: its conftest would clash with tests'
    from test_fuzz_records import (  # type: ignore[import-not-found]
        admin_answers,
        bad_records,
        logs,
        templates,
    )

    from daccore.settings.config import load_config
    from daccore.store import Store

    store = Store.from_settings(load_config(env["DAC_CONFIG"], env={}).etcd)
    tmp = Path(tempfile.mkdtemp(prefix="dac-bench-fuzz-"))
    good = templates(store, env, tmp)
    started = time.monotonic()
    written = []
    for sd in range(s, s + RECORD_SEEDS):
        for key, value in bad_records(random.Random(sd), store, good):
            key = key.replace("/fz", f"/fz{sd}-") if "/fz" in key else key
            if key.startswith(store.keys.claims) and b'"fz' in value:
                value = json.dumps(
                    {"buffer": json.loads(value)["buffer"].replace("fz", f"fz{sd}-")}
                ).encode()
            store.client.put(key, value)
            written.append(key)
    time.sleep(5)  # the dacds read what their claims name
    faults = admin_answers(env, ["fz3", f"fz{s}-3"])
    for key in written:
        if key.startswith(store.keys.claims):
            store.client.delete(key)
    setup(env, tmp, 901, "1GiB")
    slurm(env, "teardown", 901)
    faults += [
        f"traceback in {name}" for name, text in logs(workdir).items() if "Traceback" in text
    ]
    skipped = sum(text.count("skipping ") for text in logs(workdir).values())
    print(
        f"bad etcd records: {len(written)} of {RECORD_SEEDS} seeds, {skipped} skips logged, "
        f"{len(faults)} faults, {time.monotonic() - started:.1f} s"
    )
    for key in written:
        store.client.delete(key)
    return faults


def main() -> int:
    s = seed()
    print(f"fuzz seed {s} (DAC_FUZZ_SEED)")
    with local_dac() as (workdir, env):
        from clitools import run

        run(
            "dacctl",
            "--function",
            "create_persistent",
            "--token",
            "proj1",
            "--caller",
            "CLI",
            "--user",
            "1000",
            "--capacity",
            "default:512MiB",
            env=env,
        )
        work = workdir.parent / "scripts"
        work.mkdir()
        scratch = workdir.parent / "scratch"
        scratch.mkdir()
        faults = job_process(env, work, s)
        faults += commands(env, make_scratch(scratch), s)
        faults += records(workdir, env, s)
    if faults:
        print(summary(faults))
    print(f"faults {len(faults)}, budget 0: {'PASS' if not faults else 'FAIL'}")
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())

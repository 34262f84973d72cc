"""Fuzzing job_process (issue 19): thousands of generated job scripts, valid, near-valid and
hostile (tests/fuzzgen.py), through `dacctl --function job_process` against a real local DAC:
every answer is exit 0 with nothing said, or exit 1 with one printable line on stdout naming
the script's line it refuses; never a traceback, an internal error or a word on stderr.

The seed is printed; `DAC_FUZZ_SEED=<n>` runs another set. bench/fuzz.py runs 10,000."""

import os
import random
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from clitools import run
from fuzzgen import job_process_fault, job_scripts, seed, summary
from fuzzrun import as_process, in_process, local_dac

IN_PROCESS = 5000
AS_PROCESS = 200


@pytest.fixture(scope="module")
def fuzz_dac():
    """A local DAC (2 servers x 2 bricks of 512 MiB) with a persistent buffer `proj1` of
    uid 1000's, so persistentdw lines find one; yields its env and a scratch directory."""
    with local_dac() as (workdir, env):
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
        yield env, workdir.parent


def answers(run_one, scripts, directory, env, workers=1):
    """(script, fault or None, exit code) of each script through `run_one`."""

    def one(i_script):
        i, script = i_script
        # a file per script: with a file per worker slot, a thread could rewrite the one
        # another was still answering (pool.map hands item i+workers to whichever is free)
        path = directory / f"job{i}.sh"
        path.write_bytes(script)
        rc, out, err = run_one(["--function", "job_process", "--job", str(path)], env)
        return (
            script,
            job_process_fault(script, rc, out, err)
            and f"{job_process_fault(script, rc, out, err)}\nscript: {script[:300]!r}",
            rc,
        )

    if workers == 1:
        return [one(x) for x in enumerate(scripts)]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, ((i, s) for i, s in enumerate(scripts)), chunksize=1))


def test_job_process_answers_thousands_of_generated_scripts_in_one_line(fuzz_dac, capsys):
    env, top = fuzz_dac
    s = seed()
    scripts = job_scripts(random.Random(s), IN_PROCESS)
    directory = top / "in-process"
    directory.mkdir()
    started = time.monotonic()
    results = answers(in_process, scripts, directory, env)
    took = time.monotonic() - started
    faults = [f for _, f, _ in results if f]
    accepted = sum(rc == 0 for _, _, rc in results)
    with capsys.disabled():
        print(
            f"\nfuzz seed {s} (DAC_FUZZ_SEED): {len(scripts)} job scripts in process, "
            f"{accepted} accepted, {len(scripts) - accepted} refused, {len(faults)} faults, "
            f"{took:.1f} s"
        )
    assert not faults, summary(faults)
    # the generator reaches both sides of the grammar
    assert len(scripts) // 20 < accepted < len(scripts) // 2


def test_job_process_as_slurm_runs_it_answers_generated_scripts_in_one_line(fuzz_dac, capsys):
    """The installed command, a process per script as slurmctld runs it."""
    env, top = fuzz_dac
    s = seed() + 1
    scripts = job_scripts(random.Random(s), AS_PROCESS)
    directory = top / "as-process"
    directory.mkdir()
    started = time.monotonic()
    results = answers(as_process, scripts, directory, env, workers=os.cpu_count() or 2)
    took = time.monotonic() - started
    faults = [f for _, f, _ in results if f]
    with capsys.disabled():
        print(
            f"\nfuzz seed {s}: {len(scripts)} job scripts through the dacctl command, "
            f"{len(faults)} faults, {took:.1f} s"
        )
    assert not faults, summary(faults)
    assert any(rc == 0 for _, _, rc in results) and any(rc == 1 for _, _, rc in results)

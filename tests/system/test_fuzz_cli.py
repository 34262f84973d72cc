"""Fuzzing dacctl's command line (issue 19): every verb, `local`'s and Slurm's `--function`s
included, with generated arguments (tests/fuzzgen.py) against a real local DAC. Never a
traceback; a failure exits non-zero with one line (on stdout for `--function`, Slurm's
protocol; on stderr otherwise). Nothing is built: generated setups ask for more than the pool
holds, tokens name no buffer, and the real hosts are never drained.

The seed is printed; `DAC_FUZZ_SEED=<n>` runs another set."""

import os
import random
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from clitools import pools
from fuzzgen import cli_args, cli_fault, function_args, seed, summary
from fuzzrun import as_process, in_process, local_dac, make_scratch

IN_PROCESS = 600  # of each kind: verbs, and --function
AS_PROCESS = 40
HOSTS = {"dac-server-1", "dac-server-2"}


@pytest.fixture(scope="module")
def cli_dac():
    with local_dac() as (workdir, env):
        scratch = workdir.parent / "scratch"
        scratch.mkdir()
        yield env, make_scratch(scratch)


def cases(rng, scratch, n):
    return [
        cli_args(rng, scratch, HOSTS) if i % 2 else function_args(rng, scratch) for i in range(n)
    ]


def faults_of(run_one, argvs, env, workers=1):
    def one(argv):
        rc, out, err = run_one(argv, env)
        fault = cli_fault(argv, rc, out, err)
        return fault and f"{fault}\nargs: {[a[:80] for a in argv]!r}\nerr: {err[-1500:]}"

    with ThreadPoolExecutor(workers) as pool:
        return [f for f in pool.map(one, argvs) if f]


def test_every_verb_with_generated_arguments_answers_in_one_line(cli_dac, capsys):
    env, scratch = cli_dac
    s = seed()
    argvs = cases(random.Random(s), scratch, 2 * IN_PROCESS)
    verbs = {a[0] if a and not a[0].startswith("--fu") else a[1] for a in argvs if a}
    started = time.monotonic()
    faults = faults_of(in_process, argvs, env)
    with capsys.disabled():
        print(
            f"\nfuzz seed {s}: {len(argvs)} dacctl command lines in process ({len(verbs)} "
            f"verbs and functions), {len(faults)} faults, {time.monotonic() - started:.1f} s"
        )
    assert not faults, summary(faults)
    assert len(verbs) >= 25  # every verb and every function, and some that are none
    assert pools(env)["default"]["free_bricks"] == 4  # nothing was built or drained


def test_the_dacctl_command_with_generated_arguments_answers_in_one_line(cli_dac, capsys):
    env, scratch = cli_dac
    s = seed() + 1
    argvs = cases(random.Random(s), scratch, AS_PROCESS)
    started = time.monotonic()
    faults = faults_of(as_process, argvs, env, workers=os.cpu_count() or 2)
    with capsys.disabled():
        print(
            f"\nfuzz seed {s}: {len(argvs)} dacctl command lines as processes, "
            f"{len(faults)} faults, {time.monotonic() - started:.1f} s"
        )
    assert not faults, summary(faults)

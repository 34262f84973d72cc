"""Slurm's functions parsed without argparse (dacctl/commands.py `_function_words`, what the
warm answerer parses every call with): for every function of the table, every argv gives what
argparse gives, the same namespace or the same refusal in the same one line."""

import argparse
import random

import pytest

from daccore.services import command_table
from dacctl import commands
from dacctl.commands import Exit, Usage, members, parse

FUNCTIONS = [c.name.split()[-1] for c in members("function")]
HOT = ("job_process", "pools", "paths")


def by_argparse(argv):
    """parse(argv) with the fast path off: argparse alone."""
    args = argparse.Namespace(command=None)
    try:
        commands._top().parse_args(argv, args)
    except Usage as e:
        e.command = e.command or args.command
        raise
    found = args.command
    if found is None or found.handler is None:
        raise Usage("x", "a command is required")
    args.function = found.name.split()[-1]
    return found, args


def outcome(fn, argv):
    try:
        found, args = fn(argv)
    except Usage as e:
        return ("usage", e.where, e.message, e.command and e.command.name)
    except Exit as e:
        return ("exit", e.status)
    return ("ok", found.name, sorted((k, repr(v)) for k, v in vars(args).items()))


def fast(argv):
    return command_table.function_words(argv[1], argv[2:])


def test_hot_functions_take_the_fast_path():
    for name in HOT:
        argv = ["--function", name, "--token", "42", "--job", "/s", "--user", "1000", "--debug"]
        assert fast(argv) is not None
        assert outcome(parse, argv) == outcome(by_argparse, argv)
    # burst_buffer.lua's own words for each
    for argv in (
        ["--function", "pools"],
        ["--function", "job_process", "--job", "/var/spool/slurm/hash.1/job.1/script"],
        ["--function", "paths", "--job", "/s", "--token", "7", "--pathfile", "/p"],
        ["--function", "paths", "--token", "7", "--pathfile", "/p", "--array-job", "6"],
    ):
        assert fast(argv) is not None
        assert outcome(parse, argv) == outcome(by_argparse, argv)


BAD = [
    ["--user", "abc"],
    ["--user", "1.5"],
    ["--user"],
    ["--token"],
    ["--tok", "5"],  # an abbreviation: argparse's
    ["--token=5"],
    ["-t5"],
    ["stray"],
    ["--nosuch", "1"],
    ["--hurry", "yes"],
    ["--help"],
    ["--job", "--token", "5"],
    ["--user", "-5"],
    ["--"],
    ["--token", "5", "--"],
    ["-u", " 12 "],
    ["--groupid", "1_000"],
]


@pytest.mark.parametrize("words", BAD, ids=lambda w: " ".join(w) or "none")
@pytest.mark.parametrize("name", FUNCTIONS)
def test_bad_and_odd_words_as_argparse(name, words):
    argv = ["--function", name, *words]
    assert outcome(parse, argv) == outcome(by_argparse, argv)


@pytest.mark.parametrize("name", [*FUNCTIONS, "nosuch", "--job", ""])
def test_random_words_agree(name):
    rng = random.Random(f"function-words-{name}")
    flags = [f for a in command_table.DW for f in a.flags] + ["--debug", "--tok", "--", "-"]
    values = ["5", "1000", "-1", "", "x y", "abc", "/p", "=", "--token", "0x10", " 7", "١٢"]
    for _ in range(400):
        words = [rng.choice(flags + values) for _ in range(rng.randrange(0, 7))]
        argv = ["--function", name, *words]
        assert outcome(parse, argv) == outcome(by_argparse, argv), argv


def test_each_call_has_its_own_namespace():
    argv = ["--function", "paths", "--token", "7", "--pathfile", "/p"]
    _, first = parse(argv)
    first.pathfile = 3
    _, second = parse(argv)
    assert second.pathfile == "/p"

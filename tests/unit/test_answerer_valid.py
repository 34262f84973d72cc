"""Valid job_process answers kept by the answerer (dacservice/answerer/answers.py, VALID_KEPT): kept
only when the request carries its script and the mirror answered, by the script's bytes, the
other words (the user), the config read and the mirror's content; a change of any of them
answers again, a refusal is never kept, and a config read during an answer keeps nothing."""

import threading

import pytest

from daccore.services import slurm_answer
from dacservice.answerer import answers
from dacservice.answerer.answers import Answerer

SCRIPT = b"#!/bin/bash\n#DW jobdw capacity=1GiB access_mode=striped type=scratch\n"


class Mirror:
    def __init__(self):
        self.changes = 1
        self.lock = threading.Lock()

    def fresh(self):
        return True


@pytest.fixture
def server(monkeypatch):
    """An Answerer without socket or etcd: its config read is a no-op, its mirror a stand-in,
    and slurm_answer.answer records each call, answering `result[0]`."""
    a = Answerer.__new__(Answerer)
    a._lock = threading.Lock()
    a._epoch, a._valid, a._valid_moves = 1, {}, 0
    a.mirror, a._mirror_store, a._direct = Mirror(), object(), object()  # type: ignore[assignment]
    monkeypatch.setattr(a, "_reload", lambda: {})
    calls: list = []
    result = [(0, "", "")]

    def answer(argv, settings, store, script=None, pathfile_reply=False):
        calls.append((argv, script, store))
        return result[0]

    monkeypatch.setattr(slurm_answer, "answer", answer)
    return a, calls, result


def ask(a, path="/state/hash.1/job.1/script", user="1000", script=SCRIPT):
    return a.answer("job_process", ["--job", path, "--user", user], script)


def test_a_valid_answer_is_kept_until_anything_it_was_built_from_changes(server):
    a, calls, _ = server
    assert ask(a) == ("mirror", (0, "", ""))
    assert ask(a, path="/state/hash.2/job.2/script") == ("kept", (0, "", ""))  # another job
    assert len(calls) == 1 and calls[0][1] == SCRIPT
    a.mirror.changes = 2  # an event on a mirrored key
    ask(a)
    ask(a, user="2000")
    ask(a, script=SCRIPT.replace(b"1GiB", b"2GiB"))
    a._epoch += 1  # the config read again (`_reload`), or another mirror
    ask(a)
    assert len(calls) == 5
    assert ask(a)[0] == "kept" and len(calls) == 5


def test_a_refusal_is_never_kept(server):
    a, calls, result = server
    result[0] = (1, "line 2: jobdw: unknown pool 'x'\n", "")
    for _ in range(2):
        assert ask(a) == ("mirror", result[0])
    result[0] = (0, "", "")
    ask(a)
    ask(a)
    assert len(calls) == 3


def test_nothing_is_kept_without_the_script_or_from_etcd(server):
    a, calls, _ = server
    ask(a, script=None)  # the script read by the answer from its path: nothing to key by
    ask(a, script=None)
    a.mirror.fresh = lambda: False  # the mirror behind: etcd answers
    a.mirror.out_of_reach = lambda: None
    ask(a)
    ask(a)
    assert len(calls) == 4 and a._valid == {}
    assert calls[-1][2] is a._direct


def test_an_answer_built_across_a_config_read_is_not_kept(server, monkeypatch):
    a, calls, _ = server

    def answer(argv, settings, store, script=None, pathfile_reply=False):
        a._epoch += 1  # what _reload does when the file changed, meanwhile
        calls.append(argv)
        return (0, "", "")

    monkeypatch.setattr(slurm_answer, "answer", answer)
    ask(a)
    assert a._valid == {}


def test_the_kept_answers_are_bounded(server, monkeypatch):
    a, _, _ = server
    monkeypatch.setattr(answers, "VALID_KEPT", 3)
    for n in range(10):
        a.mirror.changes = n
        ask(a)
        assert len(a._valid) <= 3

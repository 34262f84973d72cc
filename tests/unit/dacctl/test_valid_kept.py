"""job_process's valid answers kept by the answerer (dacctl/datawarp.py `_valid`): kept only
for a store that says what it holds (the answerer's mirror), by the script's bytes, the user,
the two settings the checks read and the store's content; a change of any of them checks
again, a refusal is never kept, and a store without `content` (a fork's) keeps nothing."""

import argparse
import os

import pytest

from daccore.errors import UserError
from daccore.services import jobs
from dacctl import datawarp

SCRIPT = b"#!/bin/bash\n#DW jobdw capacity=1GiB access_mode=striped type=scratch\n"
SETTINGS = {"default_pool": "default", "lua_directive": "BB_LUA"}


class Store:
    def __init__(self):
        self.held = (0, 1)

    def content(self):
        return self.held


@pytest.fixture
def checks(monkeypatch):
    """Each call of jobs.validate, recorded; it refuses while `refuse` holds a reason."""
    seen: list = []
    refuse: list[str] = []

    def validate(store, d, default_pool, uid=None, at_setup=False):
        seen.append((d.jobdw.capacity, default_pool, uid))
        if refuse:
            raise UserError(refuse[0])

    monkeypatch.setattr(jobs, "validate", validate)
    monkeypatch.setattr(datawarp, "_valid", {})
    return seen, refuse


def call(tmp_path, store, data=SCRIPT, user=1000, settings=SETTINGS):
    path = tmp_path / "script"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    args = argparse.Namespace(function="job_process", job=str(path), job_fd=fd, user=user)
    try:
        return datawarp.job_process(args, settings, store)
    finally:
        os.close(fd)


def test_a_valid_answer_is_kept_until_anything_it_read_changes(tmp_path, checks):
    seen, _ = checks
    store = Store()
    assert call(tmp_path, store) == "" and call(tmp_path, store) == ""
    assert len(seen) == 1  # the second call was the kept answer
    store.held = (0, 2)  # the mirror's content changed
    call(tmp_path, store)
    call(tmp_path, store, user=2000)
    call(tmp_path, store, data=SCRIPT.replace(b"1GiB", b"2GiB"))
    call(tmp_path, store, settings={**SETTINGS, "default_pool": "other"})
    call(tmp_path, store, settings={**SETTINGS, "lua_directive": "SITE"})
    store.held = (1, 2)  # another mirror (the config named another etcd), same count
    call(tmp_path, store)
    assert len(seen) == 7


def test_a_refusal_is_never_kept(tmp_path, checks):
    seen, refuse = checks
    store = Store()
    refuse.append("line 2: jobdw: unknown pool 'x'")
    for _ in range(2):
        with pytest.raises(UserError):
            call(tmp_path, store)
    refuse.clear()
    call(tmp_path, store)
    call(tmp_path, store)
    assert len(seen) == 3


def test_a_store_without_content_keeps_nothing(tmp_path, checks):
    seen, _ = checks
    store = object()  # a fork's: it reads etcd, and cannot say what etcd holds
    call(tmp_path, store)
    call(tmp_path, store)
    assert len(seen) == 2 and datawarp._valid == {}


def test_the_kept_answers_are_bounded(tmp_path, checks, monkeypatch):
    monkeypatch.setattr(datawarp, "VALID_KEPT", 3)
    store = Store()
    for n in range(10):
        store.held = (0, n)
        call(tmp_path, store)
        assert len(datawarp._valid) <= 3

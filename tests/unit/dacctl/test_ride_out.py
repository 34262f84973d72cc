"""The slurmscriptd calls ride out etcd out of reach within restart_grace
(daccore/services/slurm_answer.py)."""

import pytest

from daccore.errors import StoreUnavailable
from daccore.services.slurm_answer import _riding_out_etcd


def flaky(failures: int):
    calls = []

    def call():
        calls.append(1)
        if len(calls) <= failures:
            raise StoreUnavailable(["https://127.0.0.1:2379"], "connection refused", 5.0)
        return "done"

    return call, calls


def test_a_call_that_fails_while_etcd_is_away_runs_again_and_succeeds(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)
    call, calls = flaky(3)
    assert _riding_out_etcd(call, 90) == "done" and len(calls) == 4


def test_past_the_grace_the_call_fails_in_one_line_saying_so():
    call, calls = flaky(10**6)
    with pytest.raises(StoreUnavailable) as e:
        _riding_out_etcd(call, 0.05)
    assert "still after restart_grace, 0s" in str(e.value) and "\n" not in str(e.value)
    assert len(calls) >= 2


def test_a_grace_of_zero_fails_at_once_with_etcds_own_line():
    call, calls = flaky(1)
    with pytest.raises(StoreUnavailable) as e:
        _riding_out_etcd(call, 0)
    assert "connection refused" in str(e.value) and len(calls) == 1

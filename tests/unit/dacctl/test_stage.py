"""`dacctl stage …` and the Python API under it (daccore.services.stage_client): the request
each sends to the user service, stood in for here, and what they print."""

import json

import pytest

from daccore.errors import UserError
from daccore.services import stage_client
from dacctl.commands import parse
from dacctl.main import main

VIEW = {
    "id": 4,
    "job": "7",
    "direction": "out",
    "type": "file",
    "source": "/mnt/dac/7/striped/ckpt",
    "destination": "/home/u/ckpt",
    "when": "at_job_end",
    "revocable": True,
    "state": "queued",
    "cancel": False,
    "bytes_done": 0,
    "bytes_total": 0,
    "files_done": 0,
    "files_total": 0,
    "rate": 0,
    "eta": None,
    "error": None,
    "created_at": 0.0,
    "started_at": 0.0,
    "ended_at": 0.0,
}


@pytest.fixture
def asked(monkeypatch):
    """The requests sent, answered with `answers[verb]`."""
    sent: list = []
    answers: dict = {}

    def ask(config, verb, args, timeout=None):
        sent.append((verb, args))
        return answers[verb]

    monkeypatch.setattr("daccore.services.user_client.ask", ask)
    monkeypatch.setattr("daccore.settings.config.load_config", lambda *a, **k: None)
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURMD_NODENAME", "node1")
    return sent, answers


def test_stage_out_asks_for_the_job_and_node_slurm_names(asked, tmp_path, monkeypatch, capsys):
    sent, answers = asked
    answers["stage-start"] = VIEW
    (tmp_path / "dir").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["stage", "out", "dir", "/home/u/ckpt", "--at-job-end", "--revocable"]) == 0
    assert capsys.readouterr().out == "stage 4: queued\n"
    assert sent == [
        (
            "stage-start",
            {
                "job": "7",
                "node": "node1",
                "direction": "out",
                "type": "directory",
                "source": str(tmp_path / "dir"),
                "destination": "/home/u/ckpt",
                "when": "at_job_end",
                "revocable": True,
            },
        )
    ]


def test_wait_fails_naming_the_failed_stage(asked, capsys):
    sent, answers = asked
    failed = {**VIEW, "state": "failed", "error": "stage out failed: /d: Permission denied"}
    answers["stage-wait"] = {"stages": [failed], "done": True}
    assert main(["stage", "wait", "4", "--json"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)[0]["state"] == "failed"
    assert err == "dacctl: user error: stage 4 failed: stage out failed: /d: Permission denied\n"
    assert sent == [("stage-wait", {"job": "7", "ids": [4], "timeout": 30})]
    assert main(["stage", "wait"]) == 1  # neither ids nor --all
    assert "give stage ids or --all" in capsys.readouterr().err


def test_list_prints_a_line_a_stage(asked, capsys):
    answers = asked[1]
    answers["stage-list"] = {"stages": [VIEW]}
    assert main(["stage", "list"]) == 0
    head, line = capsys.readouterr().out.splitlines()
    assert head.startswith("ID  STATE") and line.startswith("4   queued     at_job_end*")


def test_outside_a_job_the_api_says_so(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(UserError, match="run inside a job"):
        stage_client.list_stages()


def test_the_table_parses_every_stage_command():
    for argv in (
        ["stage", "in", "/a", "/b"],
        ["stage", "status", "3"],
        ["stage", "cancel", "3"],
        ["stage", "wait", "--all", "--timeout", "5"],
    ):
        command, _ = parse(argv)
        assert command.name == " ".join(argv[:2])

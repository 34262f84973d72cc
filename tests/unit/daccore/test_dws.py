"""daccore/services/dws.py: which specs are DWS sessions (Slurm takes their names for tokens)."""

from daccore.services.dws import sessions


def spec(name, **change):
    return {
        "name": name,
        "owner_uid": 1000,
        "request": {"type": "scratch"},
        "allocation": {"bricks": [{"host": "dac1", "capacity": 100}]},
        "desired_state": "created",
        "attachments": {"7": ["node1"]},
        **change,
    }


def test_only_a_buffer_name_under_its_own_key_is_a_session():
    docs = {
        "7": spec("7"),
        "proj1": spec("proj1"),
        "8": spec("9"),
        "7\n": spec("7\n"),
        "../x": spec("../x"),
        "p": spec("p", owner_uid="1000"),
        "q": spec("q", request=[]),
        "r": spec("r", owner_uid=True),
    }
    assert [s.name for s in sessions(docs)] == ["7", "proj1"]


def test_an_attachment_is_kept_only_under_a_job_id():
    (s,) = sessions({"7": spec("7", attachments={"7": ["node1"], "7\n": ["x"], "a": ["y"]})})
    assert s.attachments == {"7": ["node1"]} and s.compute_nodes == ["node1"]
    assert s.state == "C----" and s.size == 100 and s.storage_hosts == ["dac1"]

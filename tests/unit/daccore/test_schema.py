import json

from daccore.settings import schema


def test_schema_dir_matches_the_models():
    drift = schema._drift(schema.SCHEMA_DIR)
    assert drift == [], f"schema/ is stale for {drift}: run `make schema`"


def test_every_record_and_the_config_has_a_schema():
    names = set(schema.schemas())
    assert names == {
        "pool.json",
        "host.json",
        "host_capacity.json",
        "brick_claim.json",
        "buffer.json",
        "status.json",
        "owed.json",
        "injob_stage.json",
        "injob_stage_status.json",
        "stage_index.json",
        "stage_plan.json",
        "config.json",
    }
    buffer = json.loads(schema.schemas()["buffer.json"])
    assert {
        "owner_uid",
        "owner_gid",
        "request",
        "allocation",
        "desired_state",
        "generation",
    } <= set(buffer["properties"])


def test_drift_is_detected(tmp_path):
    for name, text in schema.schemas().items():
        (tmp_path / name).write_text(text)
    assert schema._drift(tmp_path) == []
    (tmp_path / "pool.json").write_text("{}")
    (tmp_path / "old.json").write_text("{}")
    assert schema._drift(tmp_path) == ["pool.json", "old.json"]

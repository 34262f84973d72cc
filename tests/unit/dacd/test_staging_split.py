"""What a split stage's dacds sum and compare (dacd/staging/split.py): one server's progress
counts only its shares (the status views add the servers'), the links once, on the primary;
a share report answers one plan's generation and attempt only."""

from daccore.records.models import ShareReport, StagePlan
from dacd.staging.split import Total, answers

PLAN = {"shares": [[100, 2], [60, 3], [40, 1]], "links": 5}


def test_each_servers_progress_counts_its_shares_and_the_primary_the_links():
    primary, other = Total(PLAN, [0], links=True), Total(PLAN, [1, 2], links=False)
    primary.update(0, {"bytes_done": 50, "files_done": 1, "rate": 10})
    other.update(1, {"bytes_done": 60, "files_done": 3, "rate": 20})
    mine, theirs = primary.sum(), other.sum()
    assert (mine["bytes_total"], mine["files_total"], mine["files_done"]) == (100, 7, 6)
    assert (theirs["bytes_total"], theirs["files_total"], theirs["bytes_done"]) == (100, 4, 60)
    assert theirs["eta"] == 2.0 and mine["eta"] == 5.0 and not mine["counting"]
    # a share taken over counts from then on, with its whole total
    primary.add(2)
    assert primary.sum()["bytes_total"] == 140
    # the views' sum is the stage's
    assert mine["bytes_total"] + theirs["bytes_total"] == 200
    assert mine["files_total"] + theirs["files_total"] == 2 + 3 + 1 + 5


def test_every_share_on_one_host_counts_them_all():
    total = Total(PLAN)
    total.update(1, {"bytes_done": 60, "files_done": 3})
    assert total.sum()["bytes_total"] == 200 and total.sum()["files_done"] == 8


def test_a_report_answers_its_plan_only():
    plan = StagePlan(
        buffer="7",
        step="stage_in",
        generation=3,
        attempt=2,
        primary="h1",
        fs_path="/fs/h1/7",
        digest="0" * 32,
        split=1 << 26,
        shares=[(1, 1), (1, 1)],
        owners=["h1", "h2"],
    )
    report = ShareReport(step="stage_in", generation=3, attempt=2, done=[1])
    assert answers(report, plan)
    for other in ({"generation": 2}, {"attempt": 1}, {"step": "stage_out"}):
        assert not answers(report.model_copy(update=other), plan)
    assert not answers(None, plan)

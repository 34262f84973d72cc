"""When a teardown counts as done though nodes did not answer, what they owe, and that dacd
touches nothing an owed record names outside a node's mount root."""

from recorded_site import RecordedSite

from daccore.backends import get
from daccore.errors import HostsUnreachable, PlaybookFailed
from daccore.records.models import Owed
from daccore.settings.config import DacConfig
from dacd import owed


class Debts:
    """The store's owed records, in memory (dacd.owed only puts, lists and drops them)."""

    def __init__(self):
        self.records: dict = {}

    def put_owed(self, o):
        self.records[(o.node, o.buffer)] = o

    def owed(self):
        return list(self.records.values())

    def drop_owed(self, node, buffer=None):
        return 1 if self.records.pop((node, buffer), None) else 0

    class keys:  # noqa: N801 - the Store's attribute
        @staticmethod
        def owed(node, buffer):
            return f"/dac/v1/owed/{node}/{buffer}"


def site(tmp_path):
    s = RecordedSite(tmp_path / "site", 2, bricks_per_host=1)
    config = DacConfig.model_validate(s.config("lustre"))
    buf = s.buffer([("dac1", 0), ("dac2", 0)], attachments={"42": ["node1", "node2"]})
    return s, config, buf, get("lustre", config, "dac1")


def unreachable(*hosts, rest_done=True):
    return HostsUnreachable(
        "delete", "dac1", {h: "timed out" for h in hosts}, "/kh", rest_done=rest_done
    )


def test_a_teardown_that_only_dead_nodes_missed_is_done_and_they_owe_their_mounts(tmp_path):
    s, config, buf, backend = site(tmp_path)
    store = Debts()
    attached = {"42": ["node1", "node2"]}
    assert owed.leave_owed(store, config, "dac1", buf, backend, attached, unreachable("node2"))
    (debt,) = store.owed()
    assert (debt.node, debt.buffer, debt.by_host) == ("node2", "42", "dac1")
    assert debt.unmounts and all(u.startswith(f"{s.root}/nodes/node2/") for u in debt.unmounts)


def test_a_server_that_did_not_answer_or_a_step_not_run_everywhere_is_no_done_teardown(tmp_path):
    _, config, buf, backend = site(tmp_path)
    store = Debts()
    for error in (
        unreachable("dac2"),
        unreachable("node2", "dac2"),
        unreachable("node2", rest_done=False),
        PlaybookFailed("delete", "wipe", "dac2", 1, "x"),
    ):
        assert not owed.leave_owed(store, config, "dac1", buf, backend, {}, error)
    assert store.owed() == []


def test_an_owed_record_naming_a_path_outside_the_nodes_mount_root_is_never_acted_on(tmp_path):
    s, config, _, _ = site(tmp_path)
    store, ran = Debts(), []
    store.put_owed(
        Owed(node="node1", buffer="7", by_host="dac1", pool="p", unmounts=["/etc"], prune=[])
    )
    store.put_owed(
        Owed(
            node="node1",
            buffer="8",
            by_host="dac1",
            pool="p",
            unmounts=[f"{s.root}/nodes/node1/mnt/dac/8/striped"],
            prune=[],
        )
    )
    for o in store.owed():
        owed._try(store, config, "dac1", lambda *a, **k: ran.append(a[3]), o)
    assert len(ran) == 1  # only buffer 8's, below node1's mount root
    assert [o.buffer for o in store.owed()] == ["7"]  # 8 was done and dropped


def test_a_node_still_away_keeps_its_debt(tmp_path):
    s, config, _, _ = site(tmp_path)
    store = Debts()
    store.put_owed(
        Owed(
            node="node1",
            buffer="9",
            by_host="dac1",
            pool="p",
            unmounts=[f"{s.root}/nodes/node1/mnt/dac/9/striped"],
        )
    )

    def away(*a, **k):
        raise unreachable("node1")

    owed._try(store, config, "dac1", away, store.owed()[0])
    assert [o.buffer for o in store.owed()] == ["9"]

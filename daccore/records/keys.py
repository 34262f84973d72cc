"""The etcd key layout: the only place that spells a key. Used by `daccore.store` alone.

<prefix>pools/<pool>               Pool         dacd, create-if-missing
<prefix>hosts/<host>               Host         dacd (drained: admin, by compare-and-swap)
<prefix>capacity/<host>            HostCapacity  index of hosts/<host>, same txn, for `pools`
<prefix>alive/<host>               empty        dacd, bound to its lease
<prefix>claims/<pool>/<host>/<brick>  BrickClaim  dacctl, in the buffer's allocation txn
<prefix>buffers/<name>             Buffer       dacctl
<prefix>mgs/<host>                 BrickClaim   dacctl, same txn: the host's one Lustre MGS
<prefix>intents/<name>             Buffer       dacctl: a big buffer's spec while its bricks
                                                are claimed in several transactions
<prefix>intent-leases/<name>       empty        dacctl, bound to the allocating call's lease
<prefix>owner-locks/<uid>          empty        dacctl, bound to a lease: one persistent
                                                buffer of that owner made at a time, so its
                                                caps are checked and kept atomically
<prefix>owed/<node>/<name>         Owed         the primary's dacd: what a compute node that
                                                did not answer at teardown still owes
<prefix>status/<name>/<host>       Status       the dacd of <host>
<prefix>stages/<host>/<job>/<id>   InJobStage   the user service (a running job's request);
                                                the dacd of <host> drops it when done with it
<prefix>stage-status/<host>/<job>/<id>  InJobStageStatus  the dacd of <host>
<prefix>stage-index/<job>          StageIndex   the user service, with each new stage: the
                                                job's last id and the hosts holding its stages
<prefix>stageplans/<name>/<step>  StagePlan   the primary's dacd of buffer <name>, fenced on its
                                                lease: a stage split across its servers
                                                (issue 35); dropped when the stage is done
<prefix>stage-views/<host>         text         the dacd of <host>, at start: which mount
                                                namespace it sees filesystems in, so a
                                                primary splits a stage only across servers
                                                that see its filesystem where it does
<prefix>work/<host>/<name>         generation   whoever writes buffers/<name>, same txn: a
                                                wake-up for each host that acts on it (its
                                                primary alone for lustre and daos), so a
                                                dacd watches its own work, not every spec
"""

from __future__ import annotations

__all__ = ["Keys", "prefix_end"]


def prefix_end(prefix: str) -> str:
    """The etcd range_end that makes [prefix, end) cover every key starting with prefix."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


class Keys:
    def __init__(self, prefix: str = "/dac/v1/"):
        self.root = prefix
        self.pools = prefix + "pools/"
        self.hosts = prefix + "hosts/"
        self.capacities = prefix + "capacity/"
        self.alive = prefix + "alive/"
        self.claims = prefix + "claims/"
        self.buffers = prefix + "buffers/"
        self.statuses = prefix + "status/"
        self.mgs_slots = prefix + "mgs/"
        self.owner_locks = prefix + "owner-locks/"
        self.intents = prefix + "intents/"
        self.intent_leases = prefix + "intent-leases/"
        self.works = prefix + "work/"
        self.owed_all = prefix + "owed/"
        self.stages = prefix + "stages/"
        self.stage_statuses = prefix + "stage-status/"
        self.stage_indexes = prefix + "stage-index/"
        self.stage_plans = prefix + "stageplans/"
        self.stage_views = prefix + "stage-views/"

    def pool(self, name: str) -> str:
        return self.pools + name

    def host(self, name: str) -> str:
        return self.hosts + name

    def capacity(self, name: str) -> str:
        return self.capacities + name

    def alive_key(self, host: str) -> str:
        return self.alive + host

    def claim(self, pool: str, host: str, brick: str) -> str:
        # The pool leads so that etcd can count a pool's claims without listing them.
        return f"{self.claims}{pool}/{host}/{brick}"

    def pool_claims(self, pool: str) -> str:
        return f"{self.claims}{pool}/"

    def host_claims(self, pool: str, host: str) -> str:
        return f"{self.claims}{pool}/{host}/"

    def mgs(self, host: str) -> str:
        return self.mgs_slots + host

    def owner_lock(self, uid: int) -> str:
        return self.owner_locks + str(int(uid))

    def intent(self, name: str) -> str:
        return self.intents + name

    def intent_lease(self, name: str) -> str:
        return self.intent_leases + name

    def buffer(self, name: str) -> str:
        return self.buffers + name

    def work(self, host: str, buffer: str) -> str:
        return f"{self.works}{host}/{buffer}"

    def host_work(self, host: str) -> str:
        return f"{self.works}{host}/"

    def owed(self, node: str, buffer: str) -> str:
        return f"{self.owed_all}{node}/{buffer}"

    def stage(self, host: str, job: str, id: int) -> str:
        return f"{self.stages}{host}/{job}/{id:010d}"  # zero-padded: key order is id order

    def host_stages(self, host: str) -> str:
        return f"{self.stages}{host}/"

    def job_stages(self, host: str, job: str) -> str:
        return f"{self.stages}{host}/{job}/"

    def stage_status(self, host: str, job: str, id: int) -> str:
        return f"{self.stage_statuses}{host}/{job}/{id:010d}"

    def job_stage_statuses(self, host: str, job: str) -> str:
        return f"{self.stage_statuses}{host}/{job}/"

    def stage_index(self, job: str) -> str:
        return self.stage_indexes + job

    def stage_plan(self, buffer: str, step: str) -> str:
        return f"{self.stage_plans}{buffer}/{step}"

    def buffer_stage_plans(self, buffer: str) -> str:
        return f"{self.stage_plans}{buffer}/"

    def stage_view(self, host: str) -> str:
        return self.stage_views + host

    def status(self, buffer: str, host: str) -> str:
        return f"{self.statuses}{buffer}/{host}"

    def buffer_statuses(self, buffer: str) -> str:
        return f"{self.statuses}{buffer}/"

    @staticmethod
    def last(key: str, prefix: str) -> str:
        """The name a key under `prefix` stands for: `hosts/dac1` -> `dac1`."""
        return key[len(prefix) :]

    def parse_claim(self, key: str) -> tuple[str, str, str]:
        """(pool, host, brick) of a claim key."""
        pool, host, brick = key[len(self.claims) :].split("/", 2)
        return pool, host, brick

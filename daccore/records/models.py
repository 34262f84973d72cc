"""The records dac keeps in etcd, one pydantic model each.

Every record is JSON in one etcd key (the layout is in `daccore.records.keys`); `schema/`
holds the JSON Schema generated from these models (`python -m daccore.settings.schema`). Records
ignore unknown fields so that an older dacd can still read what a newer one wrote during a rolling
upgrade.

The scheduler side (dacctl) writes a buffer's spec: `Buffer`. Each storage host (dacd) writes
what it observed: `Status`. Neither writes the other's key.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from daccore.errors import Kind
from daccore.escape import printable
from daccore.records import bounds
from daccore.records.states import State

__all__ = [
    "Name",
    "BufferName",
    "JobKey",
    "Backend",
    "AccessMode",
    "BufferType",
    "PlacementPolicy",
    "State",
    "StageType",
    "Pool",
    "Brick",
    "Host",
    "HostCapacity",
    "BrickClaim",
    "StageRequest",
    "BufferRequest",
    "BrickRef",
    "Allocation",
    "Buffer",
    "Progress",
    "StatusError",
    "Status",
    "StageDirection",
    "StageWhen",
    "StageState",
    "InJobStage",
    "InJobStageStatus",
    "StageIndex",
    "ShareReport",
    "StagePlan",
    "RECORDS",
]

#: Names that are safe inside an etcd key and a path: hosts, bricks, pools, compute nodes.
#: The patterns and bounds are daccore.records.bounds', which dacd checks every record against.
Name = Annotated[str, Field(pattern=bounds.NAME)]
#: A job id (a job's buffer) or a persistent buffer's name.
BufferName = Annotated[str, Field(pattern=bounds.BUFFER_NAME)]
#: An attachment's key: the job id.
JobKey = Annotated[str, Field(pattern=bounds.JOB_KEY)]
Bytes = Annotated[int, Field(gt=0, le=bounds.MAX_BYTES, description="bytes")]
#: A stage line's path, as the user wrote it (the copier resolves it as the user).
StagePath = Annotated[str, Field(min_length=1, max_length=bounds.MAX_PATH)]


class Backend(str, Enum):
    LOCAL = "local"
    LUSTRE = "lustre"
    DAOS = "daos"


class PlacementPolicy(str, Enum):
    """Where a buffer's bricks may come from."""

    SINGLE_HOST = "single_host"  # one filesystem on one server (local backend)
    ACROSS_SERVERS = "across_servers"  # spread over servers and PCIe switches (Lustre, DAOS)


class AccessMode(str, Enum):
    STRIPED = "striped"
    PRIVATE = "private"
    STRIPED_PRIVATE = "striped,private"


class BufferType(str, Enum):
    SCRATCH = "scratch"
    CACHE = "cache"


class StageType(str, Enum):
    FILE = "file"
    DIRECTORY = "directory"
    LIST = "list"


class Record(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Pool(Record):
    """A set of equally sized bricks served by one backend."""

    name: Name
    granularity: Bytes = Field(description="bytes per brick: requests round up to a multiple")
    backend: Backend = Backend.LOCAL
    placement: PlacementPolicy = PlacementPolicy.SINGLE_HOST
    swap: bool = Field(False, description="whether jobs may ask for swap (#DW swap)")


class Brick(Record):
    """One NVMe device (or partition, or loop device) of a storage host."""

    name: Name = Field(description="unique on its host; names the claim key")
    device: str = Field(pattern=r"^/", description="absolute device path")
    capacity: Bytes
    pool: Name
    socket: int = Field(0, ge=0, description="CPU socket the device hangs off")
    pcie_switch: str = Field("0", description="PCIe switch label, unique within the host")


class Host(Record):
    """A storage server and its bricks, written by its dacd; `drained` is set by an admin."""

    name: Name
    bricks: list[Brick] = []
    drained: bool = False
    versions: dict[str, str] = {}
    warnings: list[Annotated[str, Field(max_length=1000)]] = Field(
        [],
        max_length=100,
        description="what its dacd found open to users on the server (a brick device others "
        "may read, an fs_root others may list), for `dacctl hosts`",
    )

    @model_validator(mode="after")
    def _unique_bricks(self) -> Host:
        for attr in ("name", "device"):
            seen: set[str] = set()
            for b in self.bricks:
                value = getattr(b, attr)
                if value in seen:
                    raise ValueError(
                        f"brick {attr} '{value}' is listed twice on host '{self.name}'"
                    )
                seen.add(value)
        return self


class HostCapacity(Record):
    """An index of one Host record, written by the store in the same transaction: what the
    pool summary needs (bricks per pool, drained) without reading every brick."""

    name: Name
    drained: bool = False
    pools: dict[Name, Annotated[int, Field(ge=0)]] = Field({}, description="bricks per pool")

    @classmethod
    def of(cls, host: Host) -> HostCapacity:
        pools: dict[str, int] = {}
        for b in host.bricks:
            pools[b.pool] = pools.get(b.pool, 0) + 1
        return cls(name=host.name, drained=host.drained, pools=pools)


class BrickClaim(Record):
    """The value of a claim key: which buffer holds the brick."""

    buffer: Name
    primary: Name | None = Field(
        None,
        description="the buffer's primary host: where a backend's steps run once for all "
        "hosts (lustre, daos), the other hosts' dacd leave the buffer alone "
        "without reading its spec",
    )


class StageRequest(Record):
    type: StageType
    source: StagePath
    destination: StagePath


class BufferRequest(Record):
    """What the user asked for, already validated and in bytes."""

    capacity: Bytes
    pool: Name
    access: AccessMode = AccessMode.STRIPED
    type: BufferType = BufferType.SCRATCH
    swap: int = Field(0, ge=0, le=bounds.MAX_BYTES, description="bytes of swap per compute node")
    stage_in: list[StageRequest] = Field([], max_length=bounds.MAX_STAGE_LINES)
    stage_out: list[StageRequest] = Field([], max_length=bounds.MAX_STAGE_LINES)
    persistent: list[BufferName] = Field(
        [], max_length=bounds.MAX_STAGE_LINES, description="persistent buffers the job attaches"
    )

    @model_validator(mode="after")
    def _stage_text(self) -> BufferRequest:
        text = sum(
            len(s.source.encode(errors="surrogateescape"))
            + len(s.destination.encode(errors="surrogateescape"))
            for s in self.stage_in + self.stage_out
        )
        if text > bounds.MAX_STAGE_TEXT:
            raise ValueError(
                f"the stage lines' paths come to {text} bytes; at most {bounds.MAX_STAGE_TEXT}"
            )
        return self


class BrickRef(Record):
    host: Name
    brick: Name
    device: str = Field(
        description="for people reading the record: dacd takes the device from "
        "its own config, by brick name (daccore.rules.trust)"
    )
    capacity: Bytes


class Allocation(Record):
    bricks: list[BrickRef] = Field(min_length=1)
    primary_host: Name = Field(description="runs the buffer's staging and, for Lustre, its MGS")
    mgs_host: Name | None = Field(
        None,
        description="the host whose one Lustre MGS slot the buffer holds (a lustre pool "
        "with a per-buffer MGS: Lustre runs at most one MGS per server)",
    )

    @property
    def hosts(self) -> list[str]:
        return sorted({b.host for b in self.bricks})

    @property
    def size(self) -> int:
        return sum(b.capacity for b in self.bricks)

    @model_validator(mode="after")
    def _primary_holds_a_brick(self) -> Allocation:
        if len({(b.host, b.brick) for b in self.bricks}) != len(self.bricks):
            raise ValueError("a brick is listed twice")
        if self.primary_host not in {b.host for b in self.bricks}:
            raise ValueError(f"primary host '{self.primary_host}' holds none of the bricks")
        if self.mgs_host not in (None, self.primary_host):
            raise ValueError(
                f"the MGS runs on the primary host '{self.primary_host}', not on '{self.mgs_host}'"
            )
        return self


class Buffer(Record):
    """A buffer's spec: written by dacctl (the scheduler side) only."""

    name: BufferName
    owner_uid: int = Field(
        ge=0, lt=2**32, description="at or above the config's min_owner_uid (daccore.rules.trust)"
    )
    owner_gid: int = Field(ge=0, lt=2**32)
    job_id: int | None = Field(None, ge=0, lt=2**32)
    persistent: bool = False
    request: BufferRequest
    allocation: Allocation
    desired_state: State = State.CREATED
    attachments: dict[JobKey, Annotated[list[Name], Field(max_length=bounds.MAX_NODES)]] = Field(
        {},
        max_length=bounds.MAX_JOBS,
        description="job id -> compute nodes that must see this buffer mounted",
    )
    generation: int = Field(1, ge=1, lt=2**63, description="bumped on every change of the spec")
    created_at: float = Field(0.0, description="unix time")


class Progress(Record):
    bytes_done: int = Field(0, ge=0)
    bytes_total: int = Field(0, ge=0)
    files_done: int = Field(0, ge=0)
    files_total: int = Field(0, ge=0)
    rate: int = Field(0, ge=0, description="bytes per second since the copy began")
    eta: float | None = Field(
        None,
        ge=0,
        description="seconds left at that rate; none while counting or before the first bytes",
    )
    counting: bool = Field(
        False, description="the tree is still being walked: the totals are what was found so far"
    )


#: shares of one split stage: one a server of the buffer (a buffer's hosts are bounded by its
#: spec's size: 2,048 bricks is ~160 KB of spec, docs/architecture.md)
MAX_SHARES = 4096

#: bound of an error's detail, in characters once escaped
DETAIL_MAX = 8192

# A message names user paths, whose bytes may be anything: escaped on the way in, a record
# always serializes (surrogates do not) and prints no control character (daccore/escape.py).
# Text already printable passes unchanged, so reading a record back changes nothing.
Line = Annotated[str, BeforeValidator(lambda v: printable(v) if isinstance(v, str) else v)]
#: the newest end is kept: the failing task's output comes last
Detail = Annotated[
    str, BeforeValidator(lambda v: printable(v, "\n\t")[-DETAIL_MAX:] if isinstance(v, str) else v)
]


class StatusError(Record):
    category: Kind
    message: Line = Field(description="one line, for the user or admin")
    detail: Detail = Field(
        "", max_length=DETAIL_MAX, description="bounded debug output, for the admin"
    )


class ShareReport(Record):
    """What one host's dacd did of a split stage's shares (issue 35), in its own status: the
    shares of plan `stageplans/<buffer>/<step>` at (generation, attempt) it finished, or the
    one line of the one that failed. The primary finishes the stage once every share is
    reported done; a restarted dacd skips those it reported."""

    step: Literal["stage_in", "stage_out"]
    generation: int = Field(ge=0)
    attempt: int = Field(ge=0)
    done: list[int] = Field([], max_length=MAX_SHARES)
    failed: Line = Field("", description="the failed share's line: '<path>: <reason>'")
    category: Kind | None = Field(None, description="who must act on `failed`")
    parts: list[
        tuple[
            Annotated[int, Field(ge=0)],
            Annotated[int, Field(ge=0)],
            Annotated[int, Field(ge=0)],
            Annotated[int, Field(ge=0)],
        ]
    ] = Field(
        [],
        max_length=MAX_SHARES,
        description="each share copied here: (share, bytes done, files done, bytes a second);"
        " the primary sums them into the stage's progress, counting a share only from the"
        " host the plan names as its owner, so a lost server's last figures are not counted",
    )
    unreached: bool = Field(
        False,
        description="the plan's proof was not found at its fs_path here: this host does not"
        " see the primary's filesystem, so its shares are given to the others",
    )


class Status(Record):
    """What one host observed of one buffer: written by that host's dacd only."""

    buffer: Name
    host: Name
    state: State | None = Field(None, description="last state reached; none before the first")
    generation: int = Field(0, ge=0, description="the spec generation this status answers")
    step: Line = ""
    progress: Progress | None = None
    error: StatusError | None = None
    attached: dict[str, list[Name]] = Field(
        {}, description="job id -> compute nodes this host has mounted the buffer on"
    )
    attempt: int = Field(0, ge=0)
    updated_at: float = 0.0
    share: ShareReport | None = Field(
        None, description="the shares of a stage split across servers this host ran (issue 35)"
    )


class Owed(Record):
    """What a compute node that did not answer at a buffer's teardown still owes: its mounts
    of a filesystem that is gone (docs/reliability.md, "A node dead at teardown"). Written by
    the buffer's primary dacd, which unmounts them once the node answers again; dropped then,
    or by an admin's `dacctl forget-node`."""

    node: Name
    buffer: Name
    by_host: Name = Field(description="the storage server whose dacd tries the unmounts")
    pool: Name
    unmounts: list[str] = Field(description="mount points on the node, deepest first")
    prune: list[str] = Field([], description="their directories, removed once empty")
    extravars: dict[str, Any] = Field({}, description="the backend's unmount variables")
    since: float = 0.0


class StageDirection(str, Enum):
    IN = "in"  # into the buffer, from a path of the user's
    OUT = "out"  # out of the buffer, to a path of the user's


class StageWhen(str, Enum):
    NOW = "now"  # at once, in the background
    AT_JOB_END = "at_job_end"  # with the job's own #DW stage_out lines, before teardown


class StageState(str, Enum):
    """An in-job stage's state; the last four are final."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REVOKED = "revoked"  # a later at-job-end stage to the same destination took its place

    @property
    def final(self) -> bool:
        return self not in (StageState.QUEUED, StageState.RUNNING)


#: the part of a job's buffer an in-job stage's buffer side is in, as dacd finds it under the
#: buffer's filesystem: striped, or private/<node>
StagePart = Annotated[
    str, Field(pattern=r"^(?:striped|private/[A-Za-z0-9][A-Za-z0-9_.:-]{0,127})$")
]


class InJobStage(Record):
    """A stage a running job asked for (`dacctl stage`, libdacstage), written by dac's user
    service alone once it checked the caller, the job and the paths
    (daccore.services.injob); run by the dacd of `host`, the buffer's primary. `cancel` is the
    one field changed afterwards (the user's `dacctl stage cancel`, `scancel --hurry`)."""

    id: int = Field(ge=1, le=bounds.MAX_INJOB_STAGES)
    job: JobKey
    buffer: BufferName = Field(description="the buffer whose filesystem holds the buffer side")
    host: Name = Field(description="that buffer's primary host, whose dacd runs the stage")
    owner_uid: int = Field(ge=0, lt=2**32)
    owner_gid: int = Field(ge=0, lt=2**32)
    direction: StageDirection
    type: StageType = Field(description="file or directory")
    source: StagePath = Field(description="as the job named it, on its node")
    destination: StagePath
    part: StagePart
    inner: Annotated[str, Field(max_length=bounds.MAX_PATH)] = Field(
        description="the buffer side's path below the part, '' for the part itself"
    )
    when: StageWhen = StageWhen.NOW
    revocable: bool = False
    node: Name = Field(description="the job's node that asked")
    cancel: bool = False
    created_at: float = 0.0

    @model_validator(mode="after")
    def _plain(self) -> InJobStage:
        if self.type is StageType.LIST:
            raise ValueError("an in-job stage copies a file or a directory")
        if self.inner.startswith("/") or ".." in self.inner.split("/"):
            raise ValueError("inner must be relative, without '..'")
        return self


class InJobStageStatus(Record):
    """What the dacd of `host` observed of one in-job stage: written by that dacd alone."""

    id: int = Field(ge=1, le=bounds.MAX_INJOB_STAGES)
    job: JobKey
    host: Name
    state: StageState = StageState.QUEUED
    progress: Progress | None = None
    error: StatusError | None = None
    attempt: int = Field(0, ge=0)
    started_at: float = 0.0
    ended_at: float = 0.0
    updated_at: float = 0.0


class StageIndex(Record):
    """A job's in-job stages: the last id given and the hosts whose `stages/<host>/<job>/`
    hold them. Written by the user service with each new stage, in one transaction, so ids
    are unique and the job's cap on open stages holds under parallel requests."""

    job: JobKey
    last: int = Field(0, ge=0, le=bounds.MAX_INJOB_STAGES)
    hosts: list[Name] = Field([], max_length=bounds.MAX_INJOB_HOSTS)


class StagePlan(Record):
    """A stage split across the buffer's servers (issue 35, dacd/staging/split_primary.py):
    written by the buffer's primary dacd alone, fenced on its lease and on the spec's
    incarnation. The plan is what the primary's prepare step said (the walk's digest, the links
    made, the split threshold, each share's (bytes, files)); every server walks the source
    itself and deals the same shares from it, so no file list is ever stored. `owners[i]` is
    the host whose dacd copies share i; the primary changes it when it gives a lost server's
    share to another."""

    buffer: BufferName
    step: Literal["stage_in", "stage_out"]
    generation: int = Field(ge=0, description="the spec generation this stage answers")
    attempt: int = Field(ge=0, description="the primary's attempt of the step that planned it")
    primary: Name
    fs_path: str = Field(pattern=r"^/", max_length=bounds.MAX_PATH)
    digest: str = Field(pattern=r"^[0-9a-f]{32}$")
    links: int = Field(0, ge=0)
    split: int = Field(gt=0, description="bytes of data past which a file is cut into ranges")
    shares: list[tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]]] = Field(
        min_length=2, max_length=MAX_SHARES, description="each share's (bytes, files)"
    )
    owners: list[Name] = Field(
        min_length=2, max_length=MAX_SHARES, description="share index -> host"
    )
    failed: Line = Field("", description="set by the primary when the stage failed: stop")
    proof: str = Field(
        "",
        pattern=r"^([0-9a-f]{32})?$",
        description="names the file `.dac-split-<proof>` the primary made, as root, at the top of"
        " its fs_path: a server copies a share only where it finds it (it sees that filesystem)",
    )
    updated_at: float = 0.0

    @model_validator(mode="after")
    def _one_owner_a_share(self) -> StagePlan:
        if len(self.owners) != len(self.shares):
            raise ValueError("owners: one host for each share")
        return self

    def owned_by(self, host: str) -> list[int]:
        return [i for i, h in enumerate(self.owners) if h == host]


#: schema file stem -> model, for `schema/` and its drift test
RECORDS: dict[str, type[Record]] = {
    "pool": Pool,
    "host": Host,
    "host_capacity": HostCapacity,
    "brick_claim": BrickClaim,
    "buffer": Buffer,
    "status": Status,
    "owed": Owed,
    "injob_stage": InJobStage,
    "injob_stage_status": InJobStageStatus,
    "stage_index": StageIndex,
    "stage_plan": StagePlan,
}

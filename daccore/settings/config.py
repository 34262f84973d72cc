"""dac's configuration: one YAML file plus the environment, validated once at start.

The file is `$DAC_CONFIG` or `/etc/dac/dac.yaml`; a missing default file means "all defaults".
Environment, which wins over the file (as etcdctl does):

    DAC_ETCD_ENDPOINTS, else ETCDCTL_ENDPOINTS   comma-separated endpoints
    ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY    TLS files; any of them turns TLS on

An endpoint without a scheme gets https:// when TLS files are given and http:// otherwise,
as etcdctl does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    model_validator,
)

from daccore.errors import ConfigError
from daccore.records.models import Backend, Name, PlacementPolicy
from daccore.settings.env import DEFAULT_PATH, apply_env, config_path, etcd_urls
from daccore.units import format_size, parse_size

__all__ = [
    "DacConfig",
    "EtcdSettings",
    "PoolSettings",
    "BrickSettings",
    "HostSettings",
    "SshSettings",
    "load_config",
    "config_path",
    "DEFAULT_PATH",
]


def _size(value: Any) -> Any:
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        try:
            return parse_size(value)
        except ValueError:
            pass
    raise ValueError("must be a size like 1TiB, 500GB or 1048576")


Size = Annotated[int, BeforeValidator(_size), Field(gt=0)]


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EtcdSettings(Settings):
    endpoints: list[str] = Field(["http://127.0.0.1:2379"], min_length=1)
    cacert: str | None = None
    cert: str | None = None
    key: str | None = None
    timeout: float = Field(5.0, gt=0, description="seconds to keep retrying before giving up")
    prefix: str = Field("/dac/v1/", pattern=r"^/.*/$")
    transport: Literal["grpc", "http"] = Field(
        "grpc", description="grpc, or http for etcd's JSON gateway (see daccore.etcd)"
    )
    credentials_dir: str = Field(
        "/etc/dac/etcd",
        description="one file per etcd role (dacd, slurm, admin), each "
        "'<user>:<password>' and readable only by the account acting in that role "
        "(docs/security.md)",
    )

    @property
    def tls(self) -> bool:
        return bool(self.cacert or self.cert or self.key)

    @property
    def urls(self) -> list[str]:
        return etcd_urls(self.endpoints, self.tls)


class SshSettings(Settings):
    """How a buffer's primary dacd reaches the other servers and the compute nodes (lustre,
    daos). A node that stops answering is given up within `unreachable_timeout`: a connection
    that cannot open fails after `connect_timeout`, a session whose peer went silent after
    `alive_interval` x `alive_count`, and a step that met such a node ends then
    (docs/reliability.md)."""

    known_hosts: str = Field(
        "/etc/dac/ssh_known_hosts",
        pattern=r"^/",
        description="the host keys of every server and compute node dacd reaches, kept by the "
        "admin (docs/admin.md); a host whose key is not there, or differs, is "
        "refused",
    )
    strict_host_keys: bool = Field(
        True,
        description="check host keys against known_hosts (StrictHostKeyChecking yes); "
        "false accepts any key, as Ansible does by default",
    )
    connect_timeout: int = Field(10, ge=1, description="seconds to open a connection")
    alive_interval: int = Field(
        5, ge=1, description="seconds between two keepalives of a session (ServerAliveInterval)"
    )
    alive_count: int = Field(
        3,
        ge=1,
        description="keepalives unanswered before a session is dropped (ServerAliveCountMax)",
    )
    task_timeout: int = Field(
        900,
        ge=0,
        description="seconds one task of a playbook may run on a host before it is "
        "stopped (a mount that blocks); 0 = no limit",
    )
    unreachable_timeout: int = Field(
        60,
        ge=5,
        description="seconds after its start a step that found a host unreachable "
        "is stopped, if still running (never a teardown's delete: every "
        "live host finishes it); keep it below step_timeout",
    )

    @model_validator(mode="after")
    def _bounds(self) -> SshSettings:
        lost = max(self.connect_timeout, self.alive_interval * self.alive_count)
        if lost >= self.unreachable_timeout:
            raise ValueError(
                f"unreachable_timeout: {self.unreachable_timeout} s is not more "
                f"than the {lost} s it takes to find a host unreachable "
                "(connect_timeout, alive_interval x alive_count)"
            )
        return self


#: a Lustre LNet NID: <address or host name>@<net type><net number>, e.g. 10.0.0.1@o2ib1
NID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*@[a-z][a-z0-9]*$"
AnsibleVars = dict[str, Any]


class SharedMgs(Settings):
    host: Name = Field(description="the MGS server's name in the Ansible inventory")
    nid: str = Field(pattern=NID_PATTERN, description="its NID, used by targets and clients")
    ansible_vars: AnsibleVars = Field({}, description="inventory variables to reach it")


class LustreSettings(Settings):
    mgs: Annotated[
        Annotated[Literal["per_buffer"], Tag("per_buffer")] | Annotated[SharedMgs, Tag("shared")],
        Discriminator(lambda v: "per_buffer" if isinstance(v, str) else "shared"),
    ] = Field(
        description="per_buffer: the MGS shares MDT0 on the buffer's primary host; or a "
        "shared MGS {host, nid} that the site runs"
    )
    lnet_suffix: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9._-]*@[a-z][a-z0-9]*$",
        description="a host's NID is <host name><suffix> (e.g. @o2ib1, -opa@o2ib1) unless the "
        "host sets lnet_nid",
    )
    mdt_size: Size = Field(20 * 1024**3, description="MDT partition of a brick; the rest is OST")
    max_mdts: int = Field(24, ge=1, description="MDTs per buffer at most (DNE)")
    max_mdts_per_host: int = Field(1, ge=1, description="MDTs per server and buffer at most")
    target_root: str = Field(
        "/var/lib/dac/lustre", pattern=r"^/", description="where servers mount their targets"
    )
    tuning: Literal["none", "io500"] = Field(
        "none", description="io500: the lctl settings of the IO500 run (docs/backends.md)"
    )
    release: Literal["2.15", "2.16"] = Field(
        "2.15",
        description="the Lustre release the servers and clients run: the io500 "
        "profile sets what that release has (docs/backends.md)",
    )
    max_mod_rpcs_per_client: int = Field(
        8,
        ge=1,
        le=512,
        description="2.15: the MDS's mdt module parameter of that name (the "
        "site's modprobe.d; Lustre's default 8): io500 raises "
        "clients' max_mod_rpcs_in_flight to it, never above",
    )


#: the least NVMe and SCM a DAOS pool may have on each target of a rank (DAOS 2.6
#: src/control/server/engine/utils.go NvmeMinBytesPerTarget, ScmMinBytesPerTarget)
DAOS_NVME_PER_TARGET = 1 << 30
DAOS_SCM_PER_TARGET = 16 << 20


class DaosSettings(Settings):
    provider: str = Field(
        "ofi+tcp",
        pattern=r"^(ofi\+[a-z_;+]+|ucx\+[a-z_.,]+)$",
        description="fabric provider: ofi+tcp, ofi+cxi (Slingshot), "
        "ofi+verbs or ucx+dc_x (InfiniBand)",
    )
    targets: int = Field(16, ge=1, description="targets per engine (one engine per socket)")
    nr_xs_helpers: int = Field(4, ge=0, description="helper xstreams per engine")
    scm_percent: float = Field(
        6,
        gt=0,
        lt=100,
        description="the SCM share of a pool, as dmg's default tier ratio "
        "6,94: a rank gives a pool SCM of scm_percent/(100 - "
        "scm_percent) of the NVMe dac allocated there",
    )

    def scm_for(self, nvme: int) -> int:
        """The SCM a rank gives a pool with `nvme` bytes of NVMe there, in whole MiB."""
        return int(nvme * self.scm_percent / (100 - self.scm_percent)) >> 20 << 20


class PoolSettings(Settings):
    granularity: Size
    backend: Backend = Backend.LOCAL
    placement: PlacementPolicy | None = Field(
        None, description="default: single_host for local, across_servers otherwise"
    )
    swap: bool = Field(False, description="whether jobs may ask for swap (#DW swap)")
    lustre: LustreSettings | None = Field(None, description="backend lustre only, required")
    daos: DaosSettings | None = Field(None, description="backend daos only, required")

    @model_validator(mode="after")
    def _backend_settings(self) -> PoolSettings:
        for backend in (Backend.LUSTRE, Backend.DAOS):
            given = getattr(self, backend.value) is not None
            if given and self.backend is not backend:
                raise ValueError(
                    f"{backend.value}: settings for backend {backend.value}, but "
                    f"the pool's backend is {self.backend.value}"
                )
            if not given and self.backend is backend:
                raise ValueError(
                    f"{backend.value}: missing: backend {backend.value} needs its "
                    "settings (docs/configuration.md)"
                )
        if self.lustre and self.lustre.mdt_size >= self.granularity:
            raise ValueError(
                f"lustre.mdt_size: {format_size(self.lustre.mdt_size)} leaves no "
                f"room for an OST in a brick of {format_size(self.granularity)} "
                "(the granularity)"
            )
        if self.daos and self.granularity < self.daos.targets * DAOS_NVME_PER_TARGET:
            # a one-brick buffer's pool gets one brick of NVMe on its engine, spread over the
            # engine's targets; DAOS refuses less than 1 GiB of NVMe per target
            raise ValueError(
                f"daos.targets: {self.daos.targets} targets need at least "
                f"{format_size(self.daos.targets * DAOS_NVME_PER_TARGET)} per brick "
                f"(DAOS: 1GiB of NVMe per target); the granularity is "
                f"{format_size(self.granularity)}"
            )
        if (
            self.daos
            and self.daos.scm_for(self.granularity) < self.daos.targets * DAOS_SCM_PER_TARGET
        ):
            raise ValueError(
                f"daos.scm_percent: {self.daos.scm_percent:g} % of a brick of "
                f"{format_size(self.granularity)} gives "
                f"{format_size(self.daos.scm_for(self.granularity))} of SCM, and "
                f"{self.daos.targets} targets need at least "
                f"{format_size(self.daos.targets * DAOS_SCM_PER_TARGET)} (DAOS: "
                "16MiB of SCM per target)"
            )
        if self.swap and self.backend is not Backend.LOCAL:
            raise ValueError(
                f"swap: the {self.backend.value} backend offers no swap (only local does)"
            )
        return self

    @property
    def effective_placement(self) -> PlacementPolicy:
        if self.placement is not None:
            return self.placement
        if self.backend is Backend.LOCAL:
            return PlacementPolicy.SINGLE_HOST
        return PlacementPolicy.ACROSS_SERVERS


class BrickSettings(Settings):
    device: str = Field(pattern=r"^/")
    capacity: Size
    pool: Name = "default"
    name: Name | None = Field(None, description="default: the device's file name")
    socket: int = Field(0, ge=0)
    pcie_switch: str = "0"

    @property
    def brick_name(self) -> str:
        return self.name or os.path.basename(self.device)


class HostSettings(Settings):
    bricks: list[BrickSettings] = []
    fs_root: str = Field(
        "/var/lib/dac/fs",
        pattern=r"^/",
        description="where this server mounts its buffers' filesystems",
    )
    lnet_nid: str | None = Field(
        None, pattern=NID_PATTERN, description="this server's Lustre NID (lustre pools)"
    )
    daos_ranks: dict[int, int] = Field(
        {}, description="DAOS engine rank of each socket (daos pools): {socket: rank}"
    )
    ansible_vars: AnsibleVars = Field(
        {},
        description="inventory variables to reach this server from the others' dacd "
        "(lustre, daos: a buffer's primary runs the playbook for all its hosts)",
    )


class PersistentCaps(Settings):
    """How much of each pool one owner's persistent buffers may hold, and how many (0 = no
    cap); checked and kept atomically per owner (Store.owner_lock), for every way a
    persistent buffer is made (`dacctl create-persistent`, `#BB create_persistent`)."""

    user_share: float = Field(
        0.25, gt=0, le=1, description="of a pool's capacity one user's persistent buffers may hold"
    )
    user_buffers: int = Field(
        0, ge=0, description="persistent buffers one user may hold (0 = no cap)"
    )
    group_share: float = Field(
        1.0, gt=0, le=1, description="of a pool's capacity one group's persistent buffers may hold"
    )
    group_buffers: int = Field(
        0, ge=0, description="persistent buffers one group may hold (0 = no cap)"
    )


class DacConfig(Settings):
    etcd: EtcdSettings = EtcdSettings()
    pools: dict[Name, PoolSettings] = {}
    hosts: dict[Name, HostSettings] = Field({}, description="storage servers and their bricks")
    lease_ttl: int = Field(10, ge=2, description="seconds a dead dacd keeps its host alive")
    default_pool: Name | None = Field(
        None, description="pool of a jobdw without pool=; default: the only pool, if one"
    )
    mount_root: str = Field(
        "/mnt/dac", pattern=r"^/", description="buffers appear under <mount_root>/<job>/ on nodes"
    )
    node_root: str = Field(
        "",
        pattern=r"^(/.*)?$",
        description="where a compute node's <mount_root> is, seen from the storage server; "
        "{node} is the node's name. Default: mount_root itself (near-node flash: "
        "the storage server is the compute node)",
    )
    admin_group: str = Field(
        "",
        pattern=r"^[A-Za-z0-9_.][A-Za-z0-9_.-]*$|^$",
        description="members of this group act as root in dacctl: drain, forget, other users' "
        "buffers ('' = root only)",
    )
    lua_directive: str = Field(
        "BB_LUA",
        pattern=r"^[A-Za-z0-9_]+$",
        description="burst_buffer.conf Directive= (burst_buffer/lua)",
    )
    concurrency: int = Field(4, ge=1, description="buffers a dacd works on at once")
    metrics_address: str = Field(
        "",
        pattern=r"^((\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):[0-9]{1,5})?$",
        description="host:port where dacd serves Prometheus /metrics, e.g. 127.0.0.1:9560; "
        "'' = off (docs/operations.md)",
    )
    ansible_forks: int = Field(20, ge=1, description="hosts a playbook works on at once")
    warm_ansible: bool = Field(
        True,
        description="run playbooks through dacd's warm Ansible server, which has imported "
        "Ansible once (about 1.3 s less per step); false = a fresh "
        "ansible-playbook each run",
    )
    node_ansible_vars: AnsibleVars = Field(
        {}, description="inventory variables to reach compute nodes (lustre, daos clients)"
    )
    ssh: SshSettings = Field(SshSettings(), description="how dacd reaches other hosts over ssh")
    stage_workers: int = Field(4, ge=1, description="copy processes per stage_in/stage_out")
    step_timeout: float = Field(
        270,
        gt=0,
        description="seconds setup/pre_run/post_run/teardown wait for dacd; keep it "
        "below burst_buffer.conf's OtherTimeout (default 300)",
    )
    restart_grace: float = Field(
        90,
        ge=0,
        description="seconds a Slurm call waiting on a storage host whose dacd's "
        "lease lapsed waits for it to come back before failing: covers "
        "systemd restarting a crashed dacd (RestartSec=5, a start of a "
        "few seconds, a retry or two) with room to spare; setup, data_in, "
        "pre_run, post_run, data_out and teardown ride out etcd out of "
        "reach (quorum lost) as long too; keep it below step_timeout "
        "(docs/reliability.md)",
    )
    stage_timeout: float = Field(
        3500,
        gt=0,
        description="seconds data_in/data_out wait; dacd kills a stage's copier "
        "10 % (at most 10 s) sooner; keep it below StageInTimeout "
        "and StageOutTimeout",
    )

    slurm_user: str = Field(
        "root",
        pattern=r"^[A-Za-z0-9_.][A-Za-z0-9_.-]*$",
        description="slurm.conf's SlurmUser: with root, the only account that may run "
        "`dacctl --function` (docs/security.md)",
    )
    min_owner_uid: int = Field(
        1000,
        ge=0,
        description="lowest uid (and gid) a buffer may belong to; dacd skips a "
        "record below it. 0 lets root own buffers (docs/security.md)",
    )
    persistent_caps: PersistentCaps = PersistentCaps()
    held_share: float = Field(
        0.25,
        gt=0,
        le=1,
        description="of a pool's capacity one user's buffers may hold while their teardown "
        "fails (something dac may not end holds them: the user's own processes, a "
        "descriptor in flight); past it that user's new buffers in the pool are refused, "
        "so the rest stays for others (1 = no bound; docs/security.md)",
    )
    burst_buffer_conf: str = Field(
        "",
        pattern=r"^(/.*)?$",
        description="Slurm's burst_buffer.conf, whose AllowUsers, DenyUsers and "
        "Flags=EnablePersistent/DisablePersistent dac applies to users' "
        "`dacctl create-persistent` and `destroy-persistent` as Slurm does to "
        "#BB create_persistent ('' = none; docs/security.md)",
    )
    user_service: str = Field(
        "",
        pattern=r"^((\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):[0-9]{1,5})?$",
        description="host:port of dac's user service, which answers users' dacctl commands "
        "after checking their munge credential ('' = none; docs/security.md)",
    )
    munge_socket: str = Field(
        "",
        pattern=r"^(/.*)?$",
        description="munged's socket, for the user service and its clients ('' = munge's "
        "default, /run/munge/munge.socket.2)",
    )
    slurm_bin: str = Field(
        "",
        pattern=r"^(/.*)?$",
        description="the directory of Slurm's squeue and sinfo, which the user service asks "
        "whether a job is running and where its nodes are, for in-job stages ('' = PATH)",
    )
    slurm_conf: str = Field(
        "",
        pattern=r"^(/.*)?$",
        description="SLURM_CONF for those commands ('' = the service's environment, or "
        "Slurm's default)",
    )
    injob_open: int = Field(
        16,
        ge=1,
        le=1024,
        description="in-job stages one job may have queued or running at once "
        "(`dacctl stage`, docs/users.md)",
    )
    injob_running: int = Field(
        2,
        ge=1,
        le=64,
        description="of those, how many its buffer's server copies at once; the rest queue",
    )

    @model_validator(mode="after")
    def _ssh_within_step(self) -> DacConfig:
        if self.ssh.unreachable_timeout >= self.step_timeout:
            raise ValueError(
                f"ssh.unreachable_timeout: {self.ssh.unreachable_timeout} s must be "
                f"less than step_timeout ({self.step_timeout:g} s), or Slurm stops "
                "waiting before dacd can say which host is unreachable"
            )
        return self

    def node_mount_root(self, node: str) -> str:
        return (self.node_root or self.mount_root).replace("{node}", node)

    @model_validator(mode="after")
    def _bricks_fit_pools(self) -> DacConfig:
        for host, hs in self.hosts.items():
            seen: dict[str, int] = {}
            for i, b in enumerate(hs.bricks):
                where = f"hosts.{host}.bricks[{i}]"
                for attr, value in (("device", b.device), ("name", b.brick_name)):
                    first = seen.setdefault(f"{attr}={value}", i)
                    if first != i:
                        raise ValueError(
                            f"{where}.{attr}: '{value}' is listed twice (also bricks[{first}])"
                        )
                pool = self.pools.get(b.pool)
                if pool is None:
                    known = ", ".join(sorted(self.pools)) or "none configured"
                    raise ValueError(f"{where}.pool: unknown pool '{b.pool}' (pools: {known})")
                if b.capacity < pool.granularity:
                    raise ValueError(
                        f"{where}.capacity: {b.capacity} bytes is smaller than "
                        f"pool '{b.pool}' granularity {pool.granularity}"
                    )
                _backend_reaches(host, hs, b, pool, where)
        return self

    def own_mgs_pools(self) -> frozenset[str]:
        """Lustre pools whose buffers run their own MGS: each takes its primary's MGS slot."""
        return frozenset(
            n
            for n, p in self.pools.items()
            if p.lustre is not None and p.lustre.mgs == "per_buffer"
        )

    def lnet_nid(self, host: str, pool: str) -> str:
        """A storage server's NID for a lustre pool (validated at load)."""
        lustre = self.pools[pool].lustre
        assert lustre is not None, pool  # a lustre pool has its settings (validated at load)
        return self.hosts[host].lnet_nid or f"{host}{lustre.lnet_suffix}"


def _backend_reaches(
    host: str, hs: HostSettings, brick: BrickSettings, pool: PoolSettings, where: str
) -> None:
    """A brick of a lustre or daos pool needs what that backend needs of its host."""
    if (
        pool.backend is Backend.LUSTRE
        and not hs.lnet_nid
        and not (pool.lustre and pool.lustre.lnet_suffix)
    ):
        raise ValueError(
            f"hosts.{host}.lnet_nid: missing: its bricks are in lustre pool "
            f"'{brick.pool}', which sets no lnet_suffix either"
        )
    if pool.backend is Backend.DAOS and brick.socket not in hs.daos_ranks:
        raise ValueError(
            f"hosts.{host}.daos_ranks: no DAOS rank for socket {brick.socket} "
            f"(brick {brick.brick_name} of daos pool '{brick.pool}')"
        )


def load_config(path: str | None = None, env: Mapping[str, str] | None = None) -> DacConfig:
    """Read, overlay the environment, validate. Raises ConfigError with one line."""
    env = os.environ if env is None else env
    source = config_path(path, env)
    data = apply_env(_read_yaml(source, must_exist=source != DEFAULT_PATH), env)
    try:
        return DacConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(source, describe_validation_error(e)) from None


#: a config file this big (a site of ~400 servers x 24 bricks) is parsed in a child process
_BIG_FILE = 1 << 20

_PARSE = """import json, sys, yaml
with open(sys.argv[1]) as f:
    data = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
json.dump(data, sys.stdout)
"""


def _parse_apart(source: str) -> Any:
    """The YAML of a big config file as JSON from a child process, or None when the child
    cannot say (a YAML error, a value JSON has not: parsed here then, with the same
    messages). Parsing 2.6 MB of YAML (1,000 servers x 24 bricks) in dacd took its resident
    memory from 37 to 156 MB, 143 MB still after freeing it (the heap stays fragmented):
    half of the 150 MB a dacd may use; read as JSON, 49 MB (bench/scale.py)."""
    import json
    import subprocess
    import sys

    try:
        # -I: `-c` puts the current directory first on sys.path, and root's dacctl runs in
        # any directory: a `yaml.py` there would be imported as root
        r = subprocess.run(
            [sys.executable, "-I", "-c", _PARSE, source], capture_output=True, timeout=120
        )
        return json.loads(r.stdout) if r.returncode == 0 else None
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def _read_yaml(source: str, must_exist: bool) -> Any:
    try:
        text = Path(source).read_text()
    except FileNotFoundError:
        if must_exist:
            raise ConfigError(source, "no such file") from None
        return {}
    except OSError as e:
        raise ConfigError(source, e.strerror or str(e)) from None
    if len(text) > _BIG_FILE:
        data = _parse_apart(source)
        if data is not None:
            return data
    try:
        # libyaml's loader where PyYAML has it: a site of 1,000 servers x 24 bricks is a
        # 2.6 MB file, 10 s to parse in pure Python (bench/scale.py). A file it refuses is
        # read again by the pure one, whose messages name the line the mistake is on.
        try:
            data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError:
            data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        raise ConfigError(source, f"{where}{getattr(e, 'problem', None) or e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(source, "the top level must be a mapping")
    return data


def describe_validation_error(e: ValidationError) -> str:
    """The first problem as `field.path: message`, plus how many more there are."""
    errors = e.errors()
    first = errors[0]
    path = ""
    for part in first["loc"]:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    msg = first["msg"].removeprefix("Value error, ")
    msg = msg[:1].lower() + msg[1:]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{path}: {msg}{more}" if path else f"{msg}{more}"

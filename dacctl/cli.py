"""The handlers of dacctl's commands for people (declared, with their arguments, in
dacctl/commands.py): each calls the core and prints."""

from __future__ import annotations

import json
from pathlib import Path

from daccore.settings.config import load_config
from daccore.units import format_size
from dacctl import render
from dacctl.render import table

TYPE_CHECKING = False  # typing's own, without importing typing on a command's path; mypy: True
if TYPE_CHECKING:
    from fractions import Fraction
    from types import SimpleNamespace

    from daccore.settings.cache import Json
    from daccore.settings.config import DacConfig
    from daccore.store import Store


def _store(config: DacConfig | None = None) -> Store:
    from daccore.store import Store

    return Store.from_settings((config or load_config()).etcd)


def _rights(config: DacConfig | None = None) -> int:
    """The caller's uid for permission checks: 0 for root and the admin group
    (daccore.rules.rights)."""
    import os

    from daccore.rules.rights import rights

    if os.getuid() == 0:
        return 0  # before reading the config: root may always act, whatever it says
    return rights(
        os.getuid(), [os.getgid(), *os.getgroups()], (config or load_config()).admin_group
    )


def _answer(verb: str, config: DacConfig | None = None, **args: object) -> Json:
    """A people command's answer (daccore.services.user_requests): root and admins read etcd with
    their
    own credential; everyone else asks dac's user service, which checks who they are with munge
    (users hold no etcd credential), or reads directly where the config names no service."""
    import os

    from daccore.services.user_requests import Caller, answer

    config = config or load_config()
    rights = _rights(config)
    if rights != 0 and config.user_service:
        from daccore.services.user_client import ask

        return ask(config, verb, args)
    return answer(_store(config), config, Caller(os.getuid(), os.getgid(), rights), verb, args)


def pools(as_json: bool) -> None:
    summaries = _answer("pools")["pools"]
    if as_json:
        print(json.dumps({"pools": summaries}, indent=2))
        return
    print(
        table(
            ["POOL", "BACKEND", "GRANULARITY", "TOTAL", "FREE", "USED", "HOSTS UP/DOWN/DRAINED"],
            [
                [
                    s["name"],
                    s["backend"],
                    format_size(s["granularity"]),
                    f"{s['total_bricks']} ({format_size(s['total_bytes'])})",
                    f"{s['free_bricks']} ({format_size(s['free_bytes'])})",
                    f"{s['used_bricks']} ({format_size(s['used_bytes'])})",
                    f"{s['hosts_up']}/{s['hosts_down']}/{s['hosts_drained']}",
                ]
                for s in summaries
            ],
        )
    )


def status(buffer: str, as_json: bool, line: bool) -> None:
    from daccore.records.status_view import summary_line

    v = _answer("status", buffer=buffer)  # users see their own buffers only
    if as_json:
        print(json.dumps(v, indent=2))
    elif line:
        print(summary_line(v))
    else:
        _show_status(v, summary_line(v))


def _show_status(v: Json, headline: str) -> None:
    from rich.console import Console
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    from daccore.escape import printable
    from daccore.records.status_view import staged_text

    t = Table("HOST", "STATE", "STEP", "STAGED", "", box=None, pad_edge=False)
    for h in v["hosts"]:
        p = h["progress"]
        bar: ProgressBar | str = ""
        staged = ""
        if p:
            # no total while the walk still counts: rich draws a pulse, not a share of it
            total = None if p.get("counting") else max(p["bytes_total"], 1)
            bar = ProgressBar(total=total, completed=p["bytes_done"], width=30)
            staged = staged_text([p])
        # Text: no rich markup in a cell; printable: no control character (daccore/escape.py)
        t.add_row(
            *(
                Text(printable(x))
                for x in (h["host"], h["state"] or "new", h["step"] or "-", staged)
            ),
            bar,
        )
    console = Console()
    console.print(printable(headline), highlight=False, markup=False)
    console.print(t)
    for h in v["hosts"]:
        if h["error"]:
            console.print(
                printable(f"{h['host']}: {h['error']['category']} error: {h['error']['message']}"),
                highlight=False,
                markup=False,
            )


def hosts(as_json: bool) -> None:
    from daccore.services.admin_views import host_rows
    from daccore.settings.bb_policy import site_warnings

    config = load_config()
    store = _store(config)
    rows = host_rows(store.inventory(claim_owners=True), store.lease_ages())
    site = site_warnings(config.burst_buffer_conf)  # the controller's, where dacctl runs
    if as_json:
        print(json.dumps({"hosts": rows, "site_warnings": site}, indent=2))
    else:
        from daccore.escape import printable

        print(
            render.hosts_table(rows) + "".join(f"\nwarning: {printable(w)} (admin)" for w in site)
        )


def buffers(user: str | None, state: str | None, pool: str | None, as_json: bool) -> None:
    from daccore.services.admin_views import resolve_uid

    owner = resolve_uid(user) if user else None
    rows = _answer("buffers", owner_uid=owner, state=state, pool=pool)["buffers"]
    print(json.dumps({"buffers": rows}, indent=2) if as_json else render.buffers_table(rows))


def show(buffer: str, as_json: bool) -> None:
    d = _answer("show", buffer=buffer)
    print(json.dumps(d, indent=2) if as_json else render.buffer_detail(d))


def drain(host: str) -> None:
    _set_drained(host, True)


def undrain(host: str) -> None:
    _set_drained(host, False)


def _set_drained(host: str, drained: bool) -> None:
    from daccore.services import admin

    uid = _rights()
    admin.require_root(uid, "drain hosts" if drained else "undrain hosts")
    held = admin.set_drained(_store(), host, drained, uid)
    on = (
        (f"; still on it: {len(held)} buffer{'s' if len(held) > 1 else ''} ({', '.join(held)})")
        if drained and held
        else ""
    )
    print(f"host {host} {'drained' if drained else 'undrained'}{on}")


def create_persistent(
    name: str,
    capacity: int,
    pool: str | None,
    access: str,
    type_: str,
    owner_uid: int | None,
    owner_gid: int | None,
) -> None:
    buf = _answer(
        "create-persistent",
        name=name,
        capacity=capacity,
        pool=pool,
        access=access,
        type=type_,
        owner_uid=owner_uid,
        owner_gid=owner_gid,
    )
    print(
        f"created persistent buffer {name}: {format_size(buf['size'])} in pool "
        f"{buf['pool']} on {', '.join(buf['hosts'])}"
    )


def destroy_persistent(name: str, hurry: bool) -> None:
    _answer("destroy-persistent", name=name)
    print(f"destroyed persistent buffer {name}")


def forget(buffer: str) -> None:
    from daccore.services import admin

    uid = _rights()
    admin.require_root(uid, "forget buffers")
    hosts = admin.forget(_store(), buffer, uid)
    print(
        f"buffer {buffer} forgotten; its bricks on {', '.join(hosts)} are free again "
        "in dac: wipe them before those hosts come back"
    )


def owed(as_json: bool) -> None:
    import json
    import time

    from daccore.services import admin

    admin.require_root(_rights(), "list what nodes owe")
    debts = _store().owed()
    if as_json:
        print(json.dumps({"owed": [o.model_dump() for o in debts]}))
        return
    from daccore.escape import printable

    for o in debts:
        print(
            printable(
                f"{o.node}: buffer {o.buffer}: {len(o.unmounts)} mounts since "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(o.since))} "
                f"(tried by {o.by_host})"
            )
        )
    if not debts:
        print("no node owes anything")


def forget_node(node: str) -> None:
    from daccore.escape import printable
    from daccore.services import admin

    admin.require_root(_rights(), "forget nodes")
    dropped = _store().drop_owed(node)
    print(printable(f"node {node}: {dropped} debts forgotten"))


def estimate(script: Path, margin: Fraction, output: int, as_json: bool) -> None:
    import os

    from daccore.errors import UserError
    from daccore.rules.directives import parse_script
    from daccore.services import estimate as est

    config = load_config()
    try:
        d = parse_script(script.read_bytes(), config.lua_directive)
    except OSError as e:
        raise UserError(f"cannot read the job script {script}: {e.strerror}") from None
    measured = [est.measure(s.type, s.source) for s in d.stage_in]
    pool = est.find_pool(
        lambda: _granularities(config), d.jobdw.pool if d.jobdw else None, config.default_pool
    )
    r = est.report(d, measured, output, margin, pool)
    print(json.dumps(r, indent=2) if as_json else render.estimate(r))
    problem = est.problem_line(r, os.getuid())
    if problem:
        raise UserError(problem)


def _granularities(config: DacConfig) -> dict[str, SimpleNamespace]:
    """Pool name -> an object with its `granularity`, as est.find_pool reads Store.pools."""
    from types import SimpleNamespace

    return {
        p["name"]: SimpleNamespace(granularity=p["granularity"])
        for p in _answer("pools", config)["pools"]
    }


def slurm_files(directory: Path, force: bool, lua_bytecode: str | None) -> None:
    from dacctl.slurm_files import write_slurm_files

    for name, what in write_slurm_files(str(directory), force, lua_bytecode):
        print(f"{directory / name}: {'written' if what == 'written' else 'unchanged'}")


def etcd_certs(directory: Path, members: list[str], force: bool) -> None:
    from dacctl.etcd_certs import make_site_certs, parse_member

    for path in make_site_certs(directory, dict(map(parse_member, members)), force):
        print(f"{path}: written")


def local_up(
    workdir: Path,
    servers: int,
    bricks_per_server: int,
    brick_size: int,
    slurm_nodes: int,
    slurm_plugin: str,
    slurm_release: str,
    etcd_release: str,
    etcd_members: int,
) -> None:
    from daclocal import cluster

    state = cluster.up(
        workdir,
        servers,
        bricks_per_server,
        brick_size,
        slurm_nodes=slurm_nodes,
        slurm_plugin=slurm_plugin,
        slurm_release=slurm_release,
        etcd_release=etcd_release,
        etcd_members=etcd_members,
    )
    slurm = (
        f", Slurm {slurm_release} {slurm_nodes} nodes (burst_buffer/{slurm_plugin})"
        if slurm_nodes
        else ""
    )
    print(
        f"local DAC up in {state.workdir}: etcd {etcd_release} "
        f"{','.join(state.endpoints)}, "
        f"{servers} servers "
        f"x {bricks_per_server} bricks of {format_size(brick_size)}{slurm}"
    )
    print(f'use it: eval "$(dacctl local env --workdir {workdir})"')
    print(f"users run: {state.users['dacctl']}")


def local_env(workdir: Path) -> None:
    from daclocal import cluster

    print("\n".join(cluster.env_lines(workdir)))


def local_status(workdir: Path, as_json: bool) -> None:
    from daclocal import cluster

    report = cluster.status(workdir)
    if as_json:
        print(json.dumps(report, indent=2))
        return
    e = report["etcd"]
    print(f"workdir {report['workdir']}")
    print(f"etcd    {e['release']}")
    for m in e["members"]:
        print(f"etcd    {m['endpoint']} pid {m['pid']} {_up(m['running'])}")
    for d in report["dacd"]:
        bricks = [b for b in report["bricks"] if b["host"] == d["host"]]
        attached = sum(b["attached"] for b in bricks)
        print(
            f"dacd    {d['host']} pid {d['pid']} {_up(d['running'])}, "
            f"{attached}/{len(bricks)} loop bricks attached"
        )
    for p in report.get("slurm", []):
        print(
            f"slurm   {report['slurm_release']} {p['process']} pid {p['pid']} {_up(p['running'])}"
        )
    for p in report.get("users", []):
        print(f"users   {p['process']} {p['address']} pid {p['pid']} {_up(p['running'])}")
    if report.get("users_dacctl"):
        print(f"users   dacctl {report['users_dacctl']}")
    for p in report.get("pools", []):
        print(
            f"pool    {p['name']}: {p['free_bricks']}/{p['total_bricks']} bricks free, "
            f"{p['hosts_up']} hosts up"
        )
    if "pools_error" in report:
        print(f"pools   unavailable: {report['pools_error']}")


def _up(running: bool) -> str:
    return "running" if running else "NOT RUNNING"


def local_down(workdir: Path) -> None:
    from daclocal import cluster

    stopped = cluster.down(workdir)
    print(
        f"stopped: {', '.join(stopped)}" if stopped else f"nothing running in {workdir.resolve()}"
    )

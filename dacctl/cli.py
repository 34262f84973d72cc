"""dacctl's commands for people: each parses, calls the core, prints."""

from __future__ import annotations

import json
from pathlib import Path

import click

import daccore
from daccore.services.admin_views import STATES
from daccore.settings.config import load_config
from daccore.units import format_size, parse_size
from dacctl import render
from dacctl.render import table


def _size(ctx, param, value):
    try:
        return parse_size(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def _positive_size(ctx, param, value):
    size = _size(ctx, param, value)
    if size <= 0:
        raise click.BadParameter(f"'{value}' must be greater than zero")
    return size


def _margin(ctx, param, value):
    from daccore.services.estimate import parse_margin

    try:
        return parse_margin(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def _store(config=None):
    from daccore.store import Store

    return Store.from_settings((config or load_config()).etcd)


def _rights(config=None) -> int:
    """The caller's uid for permission checks: 0 for root and the admin group
    (daccore.rules.rights)."""
    import os

    from daccore.rules.rights import rights

    if os.getuid() == 0:
        return 0  # before reading the config: root may always act, whatever it says
    return rights(
        os.getuid(), [os.getgid(), *os.getgroups()], (config or load_config()).admin_group
    )


def _answer(verb: str, config=None, **args) -> dict:
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


@click.group(help="dac: burst buffers for Slurm. Add --debug to any command for tracebacks.")
@click.version_option(daccore.__version__, prog_name="dac")
def cli() -> None:
    pass


@cli.command(help="Pools with their granularity and brick counts.")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def pools(as_json: bool) -> None:
    summaries = _answer("pools")["pools"]
    if as_json:
        click.echo(json.dumps({"pools": summaries}, indent=2))
        return
    click.echo(
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


@cli.command(
    help="What a buffer (a job id, or a persistent buffer's name) is doing: state per "
    "storage host, the running step, staging progress, errors."
)
@click.argument("buffer")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.option("--line", is_flag=True, help="one line (what scontrol show bbstat <job> prints)")
def status(buffer: str, as_json: bool, line: bool) -> None:
    from daccore.records.status_view import summary_line

    v = _answer("status", buffer=buffer)  # users see their own buffers only
    if as_json:
        click.echo(json.dumps(v, indent=2))
    elif line:
        click.echo(summary_line(v))
    else:
        _show_status(v, summary_line(v))


def _show_status(v: dict, headline: str) -> None:
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


@cli.command(
    help="Storage hosts: up, drained or down (its dacd's alive key is gone), free and "
    "total bricks per pool (free: held by no buffer), the buffers on each."
)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def hosts(as_json: bool) -> None:
    from daccore.services.admin_views import host_rows
    from daccore.settings.bb_policy import site_warnings

    config = load_config()
    store = _store(config)
    rows = host_rows(store.inventory(claim_owners=True), store.lease_ages())
    site = site_warnings(config.burst_buffer_conf)  # the controller's, where dacctl runs
    if as_json:
        click.echo(json.dumps({"hosts": rows, "site_warnings": site}, indent=2))
    else:
        from daccore.escape import printable

        click.echo(
            render.hosts_table(rows) + "".join(f"\nwarning: {printable(w)} (admin)" for w in site)
        )


@cli.command(
    help="Buffers with their summary state (the lowest any host reached; error when "
    "a host failed the current spec; new before any host reported). Yours only, "
    "unless you are root."
)
@click.option("--user", help="only this owner's buffers (a login name or a uid)")
@click.option("--state", type=click.Choice(STATES), help="only buffers in this summary state")
@click.option("--pool", help="only buffers in this pool")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def buffers(user: str | None, state: str | None, pool: str | None, as_json: bool) -> None:
    from daccore.services.admin_views import resolve_uid

    owner = resolve_uid(user) if user else None
    rows = _answer("buffers", owner_uid=owner, state=state, pool=pool)["buffers"]
    click.echo(json.dumps({"buffers": rows}, indent=2) if as_json else render.buffers_table(rows))


@cli.command(
    help="Everything about a buffer (a job id or a persistent buffer's name): its "
    "spec, each host's status, each error with the tail of its detail. Yours "
    "only, unless you are root."
)
@click.argument("buffer")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="machine-readable output, all of the error detail included",
)
def show(buffer: str, as_json: bool) -> None:
    d = _answer("show", buffer=buffer)
    click.echo(json.dumps(d, indent=2) if as_json else render.buffer_detail(d))


@cli.command(
    help="Place no new buffers on a storage host (root only); the buffers already "
    "on it stay until their jobs end."
)
@click.argument("host")
def drain(host: str) -> None:
    _set_drained(host, True)


@cli.command(help="Place buffers on a drained storage host again (root only).")
@click.argument("host")
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
    click.echo(f"host {host} {'drained' if drained else 'undrained'}{on}")


@cli.command(
    "create-persistent",
    help="Create a persistent buffer outside any job (what "
    "'#BB create_persistent' does) and wait until dacd has built it. You own it; "
    "root may name another owner with --user and --group.",
)
@click.option("--name", required=True, help="starts with a letter")
@click.option("--capacity", required=True, callback=_positive_size, help="e.g. 1TiB")
@click.option("--pool", help="default: the config's default_pool, else the only pool")
@click.option("--access", default="striped", show_default=True)
@click.option(
    "--type", "type_", default="scratch", show_default=True, type=click.Choice(["scratch"])
)
@click.option("--user", "owner_uid", type=click.IntRange(0), help="owner uid (root only)")
@click.option("--group", "owner_gid", type=click.IntRange(0), help="owner gid (root only)")
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
    click.echo(
        f"created persistent buffer {name}: {format_size(buf['size'])} in pool "
        f"{buf['pool']} on {', '.join(buf['hosts'])}"
    )


@cli.command(
    "destroy-persistent",
    help="Destroy a persistent buffer (yours, or any as root) "
    "and wait until dacd has wiped it; refused while a job has it attached.",
)
@click.argument("name")
@click.option(
    "--hurry",
    is_flag=True,
    help="as '#BB destroy_persistent hurry': skip the "
    "stage-out; a persistent buffer has none, so this changes nothing",
)
def destroy_persistent(name: str, hurry: bool) -> None:
    _answer("destroy-persistent", name=name)
    click.echo(f"destroyed persistent buffer {name}")


@cli.command(
    help="Drop a buffer whose storage hosts are all down for good (root only): its spec "
    "and claims go without a teardown, so wipe its bricks by hand."
)
@click.argument("buffer")
def forget(buffer: str) -> None:
    from daccore.services import admin

    uid = _rights()
    admin.require_root(uid, "forget buffers")
    hosts = admin.forget(_store(), buffer, uid)
    click.echo(
        f"buffer {buffer} forgotten; its bricks on {', '.join(hosts)} are free again "
        "in dac: wipe them before those hosts come back"
    )


@cli.command(
    help="What compute nodes that did not answer at a teardown still owe: their "
    "mounts of a filesystem that is gone (root and admins). Each is unmounted "
    "once its node answers again (docs/reliability.md)."
)
@click.option("--json", "as_json", is_flag=True)
def owed(as_json: bool) -> None:
    import json
    import time

    from daccore.services import admin

    admin.require_root(_rights(), "list what nodes owe")
    debts = _store().owed()
    if as_json:
        click.echo(json.dumps({"owed": [o.model_dump() for o in debts]}))
        return
    from daccore.escape import printable

    for o in debts:
        click.echo(
            printable(
                f"{o.node}: buffer {o.buffer}: {len(o.unmounts)} mounts since "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(o.since))} "
                f"(tried by {o.by_host})"
            )
        )
    if not debts:
        click.echo("no node owes anything")


@cli.command(
    "forget-node",
    help="Declare a compute node gone for good (root and admins): "
    "drop what it owes (dacctl owed); reinstall or reboot it "
    "before it joins again, so none of its old mounts remain.",
)
@click.argument("node")
def forget_node(node: str) -> None:
    from daccore.escape import printable
    from daccore.services import admin

    admin.require_root(_rights(), "forget nodes")
    dropped = _store().drop_owed(node)
    click.echo(printable(f"node {node}: {dropped} debts forgotten"))


@cli.command(
    help="Capacity advice for a job script: the du of its stage-in sources plus a "
    "margin (the reference architecture's rule) and the output you expect, "
    "rounded up to the pool's bricks. The sources are measured as you, as the "
    "stage-in will read them; a path you cannot read fails the estimate (exit 1) "
    "after the figures, since it would fail the stage-in."
)
@click.argument("script", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--margin",
    default="0.25",
    show_default=True,
    callback=_margin,
    help="added to the data, as a fraction (0.25) or a percentage (25%)",
)
@click.option(
    "--output",
    default="0",
    callback=_size,
    help="output the job will write into its buffer, e.g. 100GiB",
)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def estimate(script: Path, margin, output: int, as_json: bool) -> None:
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
    click.echo(json.dumps(r, indent=2) if as_json else render.estimate(r))
    problem = est.problem_line(r, os.getuid())
    if problem:
        raise UserError(problem)


def _granularities(config) -> dict:
    """Pool name -> an object with its `granularity`, as est.find_pool reads Store.pools."""
    from types import SimpleNamespace

    return {
        p["name"]: SimpleNamespace(granularity=p["granularity"])
        for p in _answer("pools", config)["pools"]
    }


@cli.command(
    "slurm-files",
    help="Write this installation's Slurm plugin files into DIR (e.g. "
    "/etc/slurm): burst_buffer.lua, and sample burst_buffer.conf files for "
    "burst_buffer/lua and burst_buffer/datawarp (docs/slurm.md says which to use). "
    "A file that differs from dac's is kept unless --force.",
)
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="replace files that differ from dac's")
def slurm_files(directory: Path, force: bool) -> None:
    from dacctl.slurm_files import write_slurm_files

    for name, what in write_slurm_files(str(directory), force):
        click.echo(f"{directory / name}: {'written' if what == 'written' else 'unchanged'}")


@cli.command(
    "etcd-certs",
    help="Make a site's etcd certificates in DIR: a CA, one "
    "certificate per member naming every address and name it is dialled by, and one "
    "client certificate per role (dacd, slurm, admin), without a Common Name "
    "(docs/admin.md, 'etcd certificates'). Keys 0600.",
)
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--member",
    "members",
    multiple=True,
    required=True,
    help="NAME=ADDRESS[,NAME-OR-ADDRESS...], once per etcd member",
)
@click.option("--force", is_flag=True, help="replace an existing CA")
def etcd_certs(directory: Path, members: tuple[str, ...], force: bool) -> None:
    from dacctl.etcd_certs import make_site_certs, parse_member

    for path in make_site_certs(directory, dict(map(parse_member, members)), force):
        click.echo(f"{path}: written")


@cli.command(
    "user-service",
    help="Run dac's user service (as SlurmUser, under systemd: "
    "daccore/share/packaging/dac-users.service): it answers users' status, pools, "
    "buffers, show, create-persistent and destroy-persistent for the uid their munge "
    "credential proves, on the config's user_service (host:port).",
)
def user_service() -> None:
    import logging

    from dacservice.users import serve

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s dac-user-service[%(process)d] %(message)s"
    )
    serve(load_config())


@cli.group(
    help="The all-in-one local DAC: etcd, dacd servers and loop-file bricks on this machine."
)
def local() -> None:
    pass


def _local_root_only(verb: str) -> None:
    """The local DAC's processes, loop devices and mounts are root's: so are its commands
    (and daclocal.cluster refuses a workdir or state file anyone else could have written)."""
    import os

    from daccore.errors import UserError

    if os.geteuid() != 0 or os.getuid() != 0:
        raise UserError(
            f"dacctl local {verb} is for root only: the local DAC runs etcd, dacd "
            "and loop devices as root"
        )


_workdir = click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".dac-local"),
    show_default=True,
    help="where the local DAC keeps its state, bricks and logs",
)


@local.command(help="Start etcd and N storage servers; returns when they show in the pools.")
@_workdir
@click.option("--servers", default=2, show_default=True, type=click.IntRange(1, 64))
@click.option("--bricks-per-server", default=4, show_default=True, type=click.IntRange(1, 64))
@click.option("--brick-size", default="1GiB", show_default=True, callback=_size)
@click.option(
    "--slurm-nodes",
    default=0,
    show_default=True,
    type=click.IntRange(0, 16),
    help="also boot a Slurm with this many nodes wired to dac",
)
@click.option(
    "--slurm-plugin",
    default="lua",
    show_default=True,
    type=click.Choice(["lua", "datawarp"]),
    help="Slurm's burst buffer plugin",
)
@click.option(
    "--slurm-release",
    default="22.05",
    show_default=True,
    type=click.Choice(["22.05", "24.11", "26.05"]),
    help="22.05: the host's own Slurm; 24.11 (Debian 13) and 26.05 (Debian forky) run "
    "from a Debian chroot built on first use and cached in /var/cache/dac-local",
)
@click.option(
    "--etcd-release",
    default="3.4",
    show_default=True,
    type=click.Choice(["3.4", "3.5", "3.6"]),
    help="3.4: the host's etcd-server; 3.5: Debian 13's; 3.6: built from the Go "
    "module proxy on first use (needs Go); both cached in /var/cache/dac-local",
)
@click.option(
    "--etcd-members",
    default=1,
    show_default=True,
    type=click.IntRange(1, 7),
    help="etcd members on loopback, one cluster (3: one may fail; odd numbers only)",
)
def up(
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
    _local_root_only("up")
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
    click.echo(
        f"local DAC up in {state.workdir}: etcd {etcd_release} "
        f"{','.join(state.endpoints)}, "
        f"{servers} servers "
        f"x {bricks_per_server} bricks of {format_size(brick_size)}{slurm}"
    )
    click.echo(f'use it: eval "$(dacctl local env --workdir {workdir})"')
    click.echo(f"users run: {state.users['dacctl']}")


@local.command(help="Print the export lines a shell needs to use the local DAC.")
@_workdir
def env(workdir: Path) -> None:
    from daclocal import cluster

    click.echo("\n".join(cluster.env_lines(workdir)))


@local.command("status", help="Show the local DAC's processes, bricks and pools.")
@_workdir
@click.option("--json", "as_json", is_flag=True)
def local_status(workdir: Path, as_json: bool) -> None:
    _local_root_only("status")
    from daclocal import cluster

    report = cluster.status(workdir)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    e = report["etcd"]
    click.echo(f"workdir {report['workdir']}")
    click.echo(f"etcd    {e['release']}")
    for m in e["members"]:
        click.echo(f"etcd    {m['endpoint']} pid {m['pid']} {_up(m['running'])}")
    for d in report["dacd"]:
        bricks = [b for b in report["bricks"] if b["host"] == d["host"]]
        attached = sum(b["attached"] for b in bricks)
        click.echo(
            f"dacd    {d['host']} pid {d['pid']} {_up(d['running'])}, "
            f"{attached}/{len(bricks)} loop bricks attached"
        )
    for p in report.get("slurm", []):
        click.echo(
            f"slurm   {report['slurm_release']} {p['process']} pid {p['pid']} {_up(p['running'])}"
        )
    for p in report.get("users", []):
        click.echo(f"users   {p['process']} {p['address']} pid {p['pid']} {_up(p['running'])}")
    if report.get("users_dacctl"):
        click.echo(f"users   dacctl {report['users_dacctl']}")
    for p in report.get("pools", []):
        click.echo(
            f"pool    {p['name']}: {p['free_bricks']}/{p['total_bricks']} bricks free, "
            f"{p['hosts_up']} hosts up"
        )
    if "pools_error" in report:
        click.echo(f"pools   unavailable: {report['pools_error']}")


def _up(running: bool) -> str:
    return "running" if running else "NOT RUNNING"


@local.command(help="Stop everything `up` started here and remove its bricks.")
@_workdir
def down(workdir: Path) -> None:
    _local_root_only("down")
    from daclocal import cluster

    stopped = cluster.down(workdir)
    click.echo(
        f"stopped: {', '.join(stopped)}" if stopped else f"nothing running in {workdir.resolve()}"
    )

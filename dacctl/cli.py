"""dacctl's commands for people: each parses, calls the core, prints."""

from __future__ import annotations

import json
from pathlib import Path

import click

from daccore.config import load_config
from daccore.units import format_size, parse_size
from dacctl.render import table


def _size(ctx, param, value):
    try:
        return parse_size(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def _store():
    from daccore.store import Store
    return Store.from_settings(load_config().etcd)


@click.group(help="dac: burst buffers for Slurm. Add --debug to any command for tracebacks.")
def cli() -> None:
    pass


@cli.command(help="Pools with their granularity and brick counts.")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def pools(as_json: bool) -> None:
    from daccore.inventory import summarize
    summaries = summarize(_store().summary_inventory())
    if as_json:
        click.echo(json.dumps({"pools": [s.as_dict() for s in summaries]}, indent=2))
        return
    click.echo(table(
        ["POOL", "BACKEND", "GRANULARITY", "TOTAL", "FREE", "USED", "HOSTS UP/DOWN/DRAINED"],
        [[s.name, s.backend, format_size(s.granularity),
          f"{s.total} ({format_size(s.total * s.granularity)})",
          f"{s.free} ({format_size(s.free * s.granularity)})",
          f"{s.used} ({format_size(s.used * s.granularity)})",
          f"{s.hosts_up}/{s.hosts_down}/{s.hosts_drained}"] for s in summaries]))


@cli.command(help="What a buffer (a job id, or a persistent buffer's name) is doing: state per "
                  "storage host, the running step, staging progress, errors.")
@click.argument("buffer")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.option("--line", is_flag=True, help="one line (what scontrol show bbstat <job> prints)")
def status(buffer: str, as_json: bool, line: bool) -> None:
    import os

    from daccore.errors import NotFound
    from daccore.status_view import summary_line, view
    store = _store()
    current = store.buffer(buffer)
    # users see their own buffers only; root (Slurm's hooks, admins) sees every one
    if current is None or os.getuid() not in (0, current.record.owner_uid):
        raise NotFound(f"no buffer '{buffer}' of yours (a job id or a persistent buffer's name)")
    v = view(current.record, store.statuses(buffer))
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
    t = Table("HOST", "STATE", "STEP", "STAGED", "", box=None, pad_edge=False)
    for h in v["hosts"]:
        p = h["progress"]
        bar, staged = "", ""
        if p:
            bar = ProgressBar(total=max(p["bytes_total"], 1), completed=p["bytes_done"], width=30)
            staged = (f"{format_size(p['bytes_done'])}/{format_size(p['bytes_total'])} "
                      f"{p['files_done']}/{p['files_total']} files")
        t.add_row(h["host"], h["state"] or "new", h["step"] or "-", staged, bar)
    console = Console()
    console.print(headline, highlight=False, markup=False)
    console.print(t)
    for h in v["hosts"]:
        if h["error"]:
            console.print(f"{h['host']}: {h['error']['category']} error: "
                          f"{h['error']['message']}", highlight=False, markup=False)


@cli.group(help="The all-in-one local DAC: etcd, dacd servers and loop-file bricks on this "
                "machine.")
def local() -> None:
    pass


_workdir = click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
                        default=Path(".dac-local"), show_default=True,
                        help="where the local DAC keeps its state, bricks and logs")


@local.command(help="Start etcd and N storage servers; returns when they show in the pools.")
@_workdir
@click.option("--servers", default=2, show_default=True, type=click.IntRange(1, 64))
@click.option("--bricks-per-server", default=4, show_default=True, type=click.IntRange(1, 64))
@click.option("--brick-size", default="1GiB", show_default=True, callback=_size)
@click.option("--slurm-nodes", default=0, show_default=True, type=click.IntRange(0, 16),
              help="also boot a Slurm with this many nodes wired to dac")
@click.option("--slurm-plugin", default="lua", show_default=True,
              type=click.Choice(["lua", "datawarp"]), help="Slurm's burst buffer plugin")
def up(workdir: Path, servers: int, bricks_per_server: int, brick_size: int, slurm_nodes: int,
       slurm_plugin: str) -> None:
    from daclocal import cluster
    state = cluster.up(workdir, servers, bricks_per_server, brick_size,
                       slurm_nodes=slurm_nodes, slurm_plugin=slurm_plugin)
    slurm = f", Slurm {slurm_nodes} nodes (burst_buffer/{slurm_plugin})" if slurm_nodes else ""
    click.echo(f"local DAC up in {state.workdir}: etcd {state.endpoint}, {servers} servers "
               f"x {bricks_per_server} bricks of {format_size(brick_size)}{slurm}")
    click.echo(f"use it: eval \"$(dacctl local env --workdir {workdir})\"")


@local.command(help="Print the export lines a shell needs to use the local DAC.")
@_workdir
def env(workdir: Path) -> None:
    from daclocal import cluster
    click.echo("\n".join(cluster.env_lines(workdir)))


@local.command(help="Show the local DAC's processes, bricks and pools.")
@_workdir
@click.option("--json", "as_json", is_flag=True)
def status(workdir: Path, as_json: bool) -> None:
    from daclocal import cluster
    report = cluster.status(workdir)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    e = report["etcd"]
    click.echo(f"workdir {report['workdir']}")
    click.echo(f"etcd    {e['endpoint']} pid {e['pid']} {_up(e['running'])}")
    for d in report["dacd"]:
        bricks = [b for b in report["bricks"] if b["host"] == d["host"]]
        attached = sum(b["attached"] for b in bricks)
        click.echo(f"dacd    {d['host']} pid {d['pid']} {_up(d['running'])}, "
                   f"{attached}/{len(bricks)} loop bricks attached")
    for p in report.get("slurm", []):
        click.echo(f"slurm   {p['process']} pid {p['pid']} {_up(p['running'])}")
    for p in report.get("pools", []):
        click.echo(f"pool    {p['name']}: {p['free_bricks']}/{p['total_bricks']} bricks free, "
                   f"{p['hosts_up']} hosts up")
    if "pools_error" in report:
        click.echo(f"pools   unavailable: {report['pools_error']}")


def _up(running: bool) -> str:
    return "running" if running else "NOT RUNNING"


@local.command(help="Stop everything `up` started here and remove its bricks.")
@_workdir
def down(workdir: Path) -> None:
    from daclocal import cluster
    stopped = cluster.down(workdir)
    click.echo(f"stopped: {', '.join(stopped)}" if stopped else
               f"nothing running in {workdir.resolve()}")

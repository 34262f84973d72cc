"""Plain-text tables for people; `--json` output is produced by the commands themselves.

Every cell and line goes through `printable`: a path, a message or a step may hold any byte a
user put in a file name, and none may reach a terminal raw (daccore/escape.py)."""

from __future__ import annotations

from daccore.escape import printable

TYPE_CHECKING = False  # typing's own, without importing typing on a command's path; mypy: True
if TYPE_CHECKING:
    from daccore.settings.cache import Json

__all__ = ["table", "hosts_table", "buffers_table", "buffer_detail", "estimate"]


def table(headers: list[str], rows: list[list[object]]) -> str:
    cells = [headers] + [[printable(str(c)) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in cells
    )


def hosts_table(rows: list[Json]) -> str:
    """`dacctl hosts`: bricks as free/total per pool, the buffers holding them."""
    from daccore.services.admin_views import shorten

    text = table(
        ["HOST", "STATE", "LEASE", "BRICKS FREE/TOTAL", "BUFFERS"],
        [
            [
                r["name"],
                r["state"],
                f"{r['lease_age']:.0f}s ago" if r.get("lease_age") is not None else "-",
                ", ".join(f"{p} {c['free']}/{c['bricks']}" for p, c in r["pools"].items()) or "-",
                f"{len(r['buffers'])}: {shorten(r['buffers'])}" if r["buffers"] else "0",
            ]
            for r in rows
        ],
    )
    # what a dacd found open to users on its server: the admin must act (docs/security.md)
    return text + "".join(
        f"\nwarning: {printable(r['name'])}: {printable(w)} (admin)"
        for r in rows
        for w in r.get("warnings", ())
    )


def buffers_table(rows: list[Json]) -> str:
    """`dacctl buffers`."""
    from daccore.services.admin_views import age, shorten
    from daccore.units import format_size

    return table(
        ["NAME", "OWNER", "JOB", "STATE", "DESIRED", "SIZE", "POOL", "HOSTS", "AGE"],
        [
            [
                r["name"],
                r["owner"],
                r["job"] if r["job"] is not None else "-",
                r["state"],
                r["desired_state"],
                format_size(r["size"]),
                r["pool"],
                shorten(r["hosts"], 3),
                age(r["age_seconds"]) if r["age_seconds"] is not None else "-",
            ]
            for r in rows
        ],
    )


#: lines of an error's detail `dacctl show` prints (--json has all of it)
DETAIL_TAIL = 10


def buffer_detail(d: Json) -> str:
    """`dacctl show`: the spec, then each host's status, then each error with its detail's
    tail."""
    import time

    from daccore.services.admin_views import age
    from daccore.units import format_size

    b, req = d["buffer"], d["buffer"]["request"]
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(b["created_at"]))
        if b["created_at"]
        else "-"
    )
    job = f"job {b['job_id']}" if b["job_id"] is not None else "no job"
    lines = [
        f"buffer      {b['name']} ({'persistent' if b['persistent'] else job})",
        f"owner       {d['owner']} (uid {b['owner_uid']}, gid {b['owner_gid']})",
        f"created     {when}"
        + (f" ({age(d['age_seconds'])} ago)" if d["age_seconds"] is not None else ""),
        f"state       {d['state']}, desired {b['desired_state']}, generation {b['generation']}",
        f"request     {format_size(req['capacity'])} in pool {req['pool']}, access "
        f"{req['access']}, type {req['type']}"
        + (f", swap {format_size(req['swap'])} per node" if req["swap"] else ""),
    ]
    lines += [
        f"{'stage_' + way:<12}{s['type']} {s['source']} -> {s['destination']}"
        for way in ("in", "out")
        for s in req[f"stage_{way}"]
    ]
    if req["persistent"]:
        lines.append(f"persistent  {', '.join(req['persistent'])}")
    a = b["allocation"]
    n = len(a["bricks"])
    mgs = ", its own Lustre MGS there" if a.get("mgs_host") else ""
    lines.append(
        f"allocation  {format_size(d['size'])} in {n} brick{'s' if n > 1 else ''}, "
        f"primary {a['primary_host']}{mgs}"
    )
    lines += [
        f"  {x['host']}:{x['brick']} {x['device']} {format_size(x['capacity'])}"
        for x in a["bricks"]
    ]
    lines += [
        f"attached    job {j} on {', '.join(nodes)}"
        for j, nodes in sorted(b["attachments"].items())
    ] or ["attached    -"]
    table_at = len(lines) + 1
    lines += ["", _statuses_table(d["statuses"])]
    for host, s in d["statuses"].items():
        if s and s["error"]:
            e = s["error"]
            lines.append(
                f"{host}: {e['category']} error (generation {s['generation']}): {e['message']}"
            )
            lines += ["  " + x for x in e["detail"].rstrip().split("\n")[-DETAIL_TAIL:]]
    # the table is printable cell by cell: its newlines are its own
    return "\n".join(x if i == table_at else printable(x) for i, x in enumerate(lines))


def _statuses_table(statuses: Json) -> str:
    from daccore.records.status_view import staged_text

    rows: list[list[object]] = []
    for host, s in statuses.items():
        if s is None:
            rows.append([host, "new", "-", "-", "-", "-", "-"])
            continue
        p = s["progress"]
        staged = staged_text([p]) if p else "-"
        attached = "; ".join(f"{j}: {','.join(n)}" for j, n in sorted(s["attached"].items()))
        rows.append(
            [
                host,
                s["state"] or "new",
                s["generation"],
                s["step"] or "-",
                s["attempt"],
                attached or "-",
                staged,
            ]
        )
    return table(["HOST", "STATE", "GEN", "STEP", "ATTEMPT", "ATTACHED", "STAGED"], rows)


def estimate(r: Json) -> str:
    """`dacctl estimate`: per stage_in line what it holds, then the advice."""
    from daccore.units import format_size

    out = [
        table(
            ["LINE", "TYPE", "SOURCE", "SIZE", "ON DISK", "FILES", "DIRS", "LINKS"],
            [
                [
                    x["line"],
                    x["type"],
                    x["source"],
                    format_size(x["bytes"]),
                    format_size(x["allocated_bytes"]),
                    x["files"],
                    x["dirs"],
                    x["links"],
                ]
                for x in r["stage_in"]
            ],
        )
        if r["stage_in"]
        else "no stage_in lines"
    ]
    out.append(
        f"stage-in into the job buffer: {format_size(r['bytes'])} "
        f"({r['bytes']} bytes; {format_size(r['allocated_bytes'])} on disk), "
        f"{r['inodes']} inodes"
    )
    if r["output"]:
        out.append(f"expected output: {format_size(r['output'])}")
    pool = (
        f"pool {r['pool']}, bricks of {format_size(r['granularity'])}"
        if r["granularity"]
        else f"pool unknown ({r['pool_error']}): not rounded to bricks"
    )
    out.append(
        f"advice: capacity={r['suggestion']} ({format_size(r['needed'])} plus "
        f"{r['margin'] * 100:g}% margin = {format_size(r['with_margin'])}; {pool})"
    )
    if r["jobdw_capacity"] is not None:
        out.append(
            f"the script's jobdw capacity={format_size(r['jobdw_capacity'])} (allocated "
            f"as {format_size(r['jobdw_allocated'])}): {r['verdict']}"
        )
    else:
        out.append("the script has no jobdw line")
    return "\n".join(out)

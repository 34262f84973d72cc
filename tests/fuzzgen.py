"""Generated inputs for the fuzz tests (tests/system/test_fuzz_*.py) and bench/fuzz.py: job
scripts, dacctl arguments and etcd records, valid, near-valid and hostile, all drawn from one
`random.Random(seed)`, so a seed names a run exactly. `DAC_FUZZ_SEED` overrides the default.

Also the rules every answer must obey, shared by the tests and the bench: `job_process_fault`
and `cli_fault` return what is wrong with an answer, or None.
"""

from __future__ import annotations

import json
import os
import random
import re

DEFAULT_SEED = 19  # issue 19


def seed() -> int:
    return int(os.environ.get("DAC_FUZZ_SEED", DEFAULT_SEED))


# -- job scripts ---------------------------------------------------------------------------------

GOOD_SIZES = [
    "1GiB",
    "512MiB",
    "600MiB",
    "1TiB",
    "100MB",
    "2GB",
    "1048576",
    "1KiB",
    "1G",
    "1gib",
    "2048MiB",
    "1PB",
]
BAD_SIZES = [
    "0",
    "00",
    "-1GiB",
    "1.5GiB",
    ".5GiB",
    "1.GiB",
    "1Gi",
    "10N",
    "2nodes",
    "GiB",
    "1e9",
    "0x10",
    "１GiB",
    "١٢GiB",
    "1 GiB",
    "9" * 30,
    "9" * 5000,
    "0" * 5000 + "1GiB",
    "18446744073709551616",
    "18446744073709551616GiB",
    "1GiB,",
    "1GiB;id",
    "$(id)GiB",
    "{{7*7}}GiB",
    "1025PiB",
    "1EiB",
    "nan",
    "inf",
    "1_000GiB",
    "+1GiB",
    "1GiBGiB",
    "1ＧiB",
    "1GiB\u200b",
]
NAMES = [
    "proj1",
    "p",
    "a" * 64,
    "a" * 65,
    "9lives",
    "-x",
    "proj/../x",
    "{{x}}",
    "$(id)",
    "näme",
    "proj1;id",
    "x.y_z-1",
    "_x",
    "P" * 300,
]
POOLS = [
    "default",
    "fast",
    "a" * 128,
    "a" * 129,
    "../etc",
    "{{pool}}",
    "dëfault",
    ":x",
    "-",
    "default/x",
]
ACCESS = [
    "striped",
    "private",
    "striped,private",
    "private,striped",
    "striped,striped",
    "cache",
    "STRIPED",
    "striped,",
    ",",
    "striped,private,striped",
]
TYPES = ["scratch", "cache", "swap", "SCRATCH", "file", "directory", "list", "dir"]
PATHS = [
    "/home/u/in",
    "/home/u/in/f",
    "$DW_JOB_STRIPED/in",
    "${DW_JOB_STRIPED}/x",
    "$DW_JOB_STRIPED",
    "$DW_JOB_PRIVATE/x",
    "$DW_PERSISTENT_STRIPED_proj1/x",
    "$DW_OTHER/x",
    "${DW_JOB_STRIPED",
    "${}/x",
    "relative/x",
    "/a/../b",
    "$DW_JOB_STRIPED/../../etc",
    "/x/$(rm -rf /)",
    "/x/{{lookup('pipe','id')}}",
    "/x/capacity=1GiB",
    "/" + "a" * 5000,
    "$",
    "/tmp/ünï",
    "//",
    "/",
    "$DW_JOB_STRIPED/a=b",
]
HOSTILE = [
    "\x00",
    "\x1b]0;pwned\x07",
    "\r",
    "\t",
    "\x7f",
    "\u2028",
    "\u00a0",
    "\u202e",
    "'",
    '"',
    "`",
    "\\",
    "$(id)",
    "{{ 7*7 }}",
    "{% x %}",
    ";",
    "|",
    "&&",
    "\x85",
    "\x0b",
    "\x0c",
    "\ufeff",
    "\udcff",
    "=",
    "==",
    " = ",
    "#DW",
]
RAW = [
    b"\xff",
    b"\xfe\xff",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\xc0\xaf",
    b"\x00",
    b"\xe2\x80\xa8",
    b"\r\n",
    b"\n#DW ",
    b"\\\n",
]
PREFIXES = ["#DW", "#BB", "#BB_LUA", "#dw", "# DW", "#DW\t", "##DW", "#BB_LUA:", "#SBATCH", "#"]
KEYS = {
    "jobdw": {"capacity": GOOD_SIZES, "access_mode": ACCESS, "type": TYPES, "pool": POOLS},
    "persistentdw": {"name": NAMES},
    "stage_in": {"type": TYPES, "source": PATHS, "destination": PATHS},
    "stage_out": {"type": TYPES, "source": PATHS, "destination": PATHS},
    "create_persistent": {
        "name": NAMES,
        "capacity": GOOD_SIZES,
        "access_mode": ACCESS,
        "access": ACCESS,
        "type": TYPES,
        "pool": POOLS,
    },
    "destroy_persistent": {"name": NAMES},
}
VALID_LINES = [
    "#DW jobdw capacity=1GiB access_mode=striped type=scratch pool=default",
    "#DW jobdw capacity=512MiB access_mode=striped,private",
    "#BB capacity=1GiB access=striped pool=default",
    "#DW stage_in type=directory source=/home/u/in destination=$DW_JOB_STRIPED/in",
    "#DW stage_out type=file source=$DW_JOB_STRIPED/out destination=/home/u/out",
    "#DW swap 256MiB",
    "#DW persistentdw name=proj1",
    "#BB create_persistent name=proj2 capacity=512MiB access_mode=striped type=scratch",
    "#BB destroy_persistent name=proj2 hurry",
    "#SBATCH -N 2",
    "#SBATCH --time=10",
]


def _line(rng: random.Random) -> str:
    """One line of a script's leading comment block: a directive, right or wrong, or not one."""
    roll = rng.random()
    if roll < 0.30:
        return rng.choice(VALID_LINES)
    if roll < 0.38:
        return rng.choice(
            [
                "#SBATCH -N 1",
                "# a comment",
                "#",
                "#!/bin/sh",
                "#DW",
                "#BB ",
                "#DW unknown x=y",
                "#DW " + rng.choice(list(KEYS)),
                "#DW swap",
                "#DW swap " + rng.choice(GOOD_SIZES + BAD_SIZES),
                "#DW swap 1 2",
            ]
        )
    directive = rng.choice(list(KEYS) + ["bare"])
    keys = KEYS["jobdw"] if directive == "bare" else KEYS[directive]
    args = []
    for key, values in keys.items():
        if rng.random() < 0.8:
            value = rng.choice(values + BAD_SIZES if key == "capacity" else values)
            args.append(f"{key}={value}")
    if rng.random() < 0.1:
        args.append(
            rng.choice(
                [
                    "bogus=1",
                    "capacity=1GiB",
                    "hurry",
                    "name",
                    "=x",
                    "pool=",
                    "x" * 200 + "=1",
                    "access=striped",
                    "name=a=b",
                ]
            )
        )
    rng.shuffle(args)
    words = args if directive == "bare" else [directive, *args]
    return rng.choice(PREFIXES[:3] + PREFIXES) + " " + " ".join(words)


def _mutate(rng: random.Random, text: str) -> str:
    """A hostile character, a cut, or a very long run somewhere in `text`."""
    at = rng.randrange(len(text) + 1)
    roll = rng.random()
    if roll < 0.6:
        return text[:at] + rng.choice(HOSTILE) + text[at:]
    if roll < 0.8:
        return text[:at]
    if roll < 0.9:
        return text[:at] + rng.choice("x=9/ ") * rng.choice((300, 5000, 70000)) + text[at:]
    return text + " \\"  # a continuation onto the next line


def job_script(rng: random.Random) -> bytes:
    """A job script: a shebang (mostly), 1-8 lines of comment block, maybe a body."""
    lines = ["#!/bin/bash"] if rng.random() < 0.9 else []
    for _ in range(rng.randint(1, 8)):
        line = _line(rng)
        if rng.random() < 0.35:
            line = _mutate(rng, line)
        lines.append(line)
    if rng.random() < 0.3:
        lines.insert(rng.randrange(1, len(lines) + 1), rng.choice(["srun x", "", "echo $((1))"]))
    end = "\r\n" if rng.random() < 0.1 else "\n"
    data = (end.join(lines) + end).encode("utf-8", "surrogateescape")
    if rng.random() < 0.1:
        at = rng.randrange(len(data) + 1)
        data = data[:at] + rng.choice(RAW) + data[at:]
    return data


#: Scripts every run tries, whatever the seed: the extremes the generator rarely reaches.
EDGE_SCRIPTS = [
    b"",
    b"#!/bin/sh\n",
    b"\x00" * 64,
    b"\xff" * 100,
    b"#DW",
    b"#DW\n",
    b"\n#DW jobdw\n",
    b"#!/bin/sh\n#DW jobdw capacity=1GiB " + b"x" * (5 << 20) + b"\n",
    b"#!/bin/sh\n" + b"#SBATCH -N 1\n" * 20000 + b"#DW jobdw capacity=1GiB\n",
    b"#!/bin/sh\n" + b"#DW persistentdw name=p1\n" * 2000,
    b"#!/bin/sh\n#DW jobdw \\\n" + b"#\\\n" * 5000 + b"# capacity=1GiB\n",
    b"#!/bin/sh\n#DW jobdw capacity=1GiB\n#DW jobdw capacity=1GiB\n",
    b"#!/bin/sh\n#DW swap 1GiB\n",
    b"#!/bin/sh\n#DW jobdw capacity=" + b"9" * 100000 + b"\n",
    "#!/bin/sh\n#DW jobdw capacity=１GiB\n".encode(),
    b"#!/bin/sh\r\n#DW jobdw capacity=1GiB\r\n",
]


def job_scripts(rng: random.Random, n: int) -> list[bytes]:
    return EDGE_SCRIPTS + [job_script(rng) for _ in range(max(0, n - len(EDGE_SCRIPTS)))]


_LINE_REFUSAL = re.compile(r"line ([0-9]+): ")


def job_process_fault(script: bytes, rc: int, out: str, err: str) -> str | None:
    """What is wrong with job_process's answer to `script`, or None: exit 0 and nothing said,
    or exit 1 with one printable line on stdout naming the script's line it refuses (Slurm
    shows it to the user), nothing on stderr, never a traceback or an internal error."""
    if "Traceback" in out + err:
        return "a traceback"
    if err:
        return f"stderr: {err[:200]!r}"
    if rc == 0:
        return None if out == "" else f"exit 0 with output {out[:200]!r}"
    if rc != 1:
        return f"exit {rc}"
    if not out.endswith("\n") or out.count("\n") != 1 or not out[:-1].isprintable():
        return f"not one printable line: {out[:200]!r}"
    if out.startswith("dac internal error") or len(out) > 1001:
        return f"internal error or overlong: {out[:200]!r}"
    m = _LINE_REFUSAL.match(out)
    lines = script.count(b"\n") + 1
    if m is None or not 1 <= int(m.group(1)) <= lines:
        return f"names no line of the script: {out[:200]!r}"
    return None


# -- dacctl arguments ----------------------------------------------------------------------------

WORDS = [
    "",
    "-",
    "--",
    "x",
    "1",
    "0",
    "-1",
    "4294967296",
    "99999999999999999999",
    "default",
    "dac-server-1x",
    "proj1",
    "../..",
    "/etc/shadow",
    "--json",
    "--help",
    "--line",
    "--bogus",
    "-x",
    "=",
    "{{x}}",
    "$(id)",
    "\x1b]0;t\x07",
    "ünï",
    "\udcff",
    "a" * 5000,
    "1GiB",
    "1.5GiB",
    "-5GiB",
    "25%",
    "1e9",
    "nan",
    " ",
    "\t",
    "\n",
    "a\nb",
    "--user",
    "--state",
    "--pool",
    "new",
    "error",
    "mounted",
    "root",
    "nobody",
]
#: verb -> options it takes (None: a flag); the positional arguments come from WORDS
VERBS: dict[str, dict[str, list[str] | None]] = {
    "pools": {"--json": None},
    "status": {"--json": None, "--line": None},
    "hosts": {"--json": None},
    "buffers": {
        "--user": WORDS,
        "--state": ["new", "created", "error", "x", ""],
        "--pool": WORDS,
        "--json": None,
    },
    "show": {"--json": None},
    "drain": {},
    "undrain": {},
    "forget": {},
    "destroy-persistent": {"--hurry": None},
    "create-persistent": {
        "--name": NAMES + WORDS,
        "--capacity": BAD_SIZES + ["1PiB", "64TiB"],
        "--pool": POOLS,
        "--access": ACCESS,
        "--type": TYPES,
        "--user": WORDS,
        "--group": WORDS,
    },
    "estimate": {
        "--margin": ["0.25", "25%", "-1", "x", "1e999", "nan", "200%", ""],
        "--output": BAD_SIZES + GOOD_SIZES,
        "--json": None,
    },
    "slurm-files": {"--force": None, "--lua-bytecode": ["lua5.1", "/bin/false", "nosuch", ""]},
    "local": {},
}
LOCAL = {"env": {}, "status": {"--json": None}, "down": {}}
#: `local up` only with an argument it refuses before starting anything
LOCAL_UP_BAD = [
    ["--servers", "0"],
    ["--servers", "65"],
    ["--servers", "x"],
    ["--bricks-per-server", "-1"],
    ["--brick-size", "1.5.5GiB"],
    ["--slurm-plugin", "cray"],
    ["--slurm-release", "21.08"],
    ["--etcd-release", "3.3"],
    ["--etcd-members", "0"],
    ["--bogus"],
]


def cli_args(rng: random.Random, scratch: str, hosts: set[str]) -> list[str]:
    """dacctl's arguments for a verb, right and wrong. `scratch`: a directory for the paths
    the verbs write or read (slurm-files, estimate, local's workdirs: never "", the current
    directory); `hosts`: the real storage hosts, never drained here."""
    verb = rng.choice(list(VERBS) + ["--version", "--help", "bogus", ""])
    if verb not in VERBS:
        return [verb] if verb else []
    if verb == "local":
        sub = rng.choice(list(LOCAL) + ["up", "bogus"])
        if sub == "up":
            return ["local", "up", *rng.choice(LOCAL_UP_BAD)]
        return ["local", sub, "--workdir", _workdir(rng, scratch)] + (
            ["--json"] if sub == "status" and rng.random() < 0.5 else []
        )
    args = [verb]
    for option, values in VERBS[verb].items():
        if rng.random() < 0.4:
            args += [option] if values is None else [option, rng.choice(values)]
    positional = {
        "status": 1,
        "show": 1,
        "drain": 1,
        "undrain": 1,
        "forget": 1,
        "destroy-persistent": 1,
        "estimate": 1,
        "slurm-files": 1,
    }.get(verb, 0)
    if rng.random() < 0.1:
        positional += rng.choice((-1, 1))
    for _ in range(max(0, positional)):
        if verb == "estimate":
            args.append(
                rng.choice(
                    [
                        f"{scratch}/script-{rng.randrange(4)}",
                        scratch,
                        "",
                        "/nonexistent",
                        f"{scratch}/\udcff",
                    ]
                )
            )
        elif verb == "slurm-files":
            args.append(
                rng.choice(
                    [
                        f"{scratch}/slurm-{rng.randrange(3)}",
                        f"{scratch}/script-0",
                        f"{scratch}/no/such/dir",
                    ]
                )
            )
        else:
            args.append(rng.choice(WORDS + NAMES))
    if verb in ("drain", "undrain") and hosts & set(args):
        return [verb, "not-" + "-".join(sorted(hosts))]
    if rng.random() < 0.1:
        args.insert(rng.randrange(len(args) + 1), rng.choice(["--bogus", "-h", "--version"]))
    return args


def _workdir(rng: random.Random, scratch: str) -> str:
    return rng.choice(
        [
            f"{scratch}/none",
            f"{scratch}/script-0",
            f"{scratch}/workdir-junk",
            f"{scratch}/workdir-list",
            "/nonexistent/x",
        ]
    )


def scratch_files(scratch: str) -> dict[str, bytes]:
    """What the scratch directory holds for cli_args and function_args: job scripts (none
    fits the pool, so no setup builds anything), a node list, and workdirs with a state.json
    nobody's `up` wrote (junk only, never a pid: `down` stops the pids a state names)."""
    return {
        "in/data": b"42\n",
        "script-0": (
            f"#!/bin/sh\n#DW jobdw capacity=1PiB access_mode=striped\n#DW stage_in "
            f"type=directory source={scratch}/in destination=$DW_JOB_STRIPED/in\n"
        ).encode(),
        "script-1": b"#!/bin/sh\n#DW jobdw capacity=\xff\x00 \x1b]0;t\x07\n",
        "script-2": (
            b"#!/bin/sh\n#DW jobdw capacity=1PiB\n#DW persistentdw name=proj9\n"
            b"#DW stage_in type=list source=/nonexistent destination=$DW_JOB_STRIPED/x\n"
        ),
        "script-3/x": b"",  # script-3: a directory
        "nodes": b"node1\nnode\xff\n{{x}}\n" + b"n" * 3000 + b"\n",
        "workdir-junk/state.json": b"\xff{not json",
        "workdir-list/state.json": b"[1]",
        "slurm-0/.keep": b"",
    }


FUNCTIONS = [
    "pools",
    "show_instances",
    "show_sessions",
    "show_configurations",
    "job_process",
    "setup",
    "real_size",
    "data_in",
    "paths",
    "pre_run",
    "post_run",
    "data_out",
    "teardown",
    "create_persistent",
    "bogus",
    "",
]
FUNCTION_OPTIONS = {
    "--token": [
        "77001",
        "0",
        "-1",
        "x",
        "77001\n",
        "4294967296",
        "a" * 70,
        "proj9",
        "9proj",
        "../77001",
        "",
    ],
    "--user": ["1000", "0", "-1", "x", "999", "4294967295", "1e3"],
    "--groupid": ["1000", "0", "x"],
    "--caller": ["SLURM", "CLI", ""],
    "--capacity": [
        "default:1PiB",
        "default:x",
        ":1GiB",
        "x",
        "fast:1GiB",
        "default:-1",
        "default:1.5GiB",
    ],
    "--access": ACCESS,
    "--type": TYPES,
    "--nodes": ["n1", "n[1-2]", "", "$(id)"],
    "--hurry": None,
    "--bogus": None,
}
FILE_OPTIONS = ["--job", "--nodehostnamefile", "--pathfile"]


def function_args(rng: random.Random, scratch: str) -> list[str]:
    """`dacctl --function` arguments, right and wrong; tokens name no real buffer, and no
    setup or create_persistent fits the pool (1 PiB), so nothing is built."""
    args = ["--function", rng.choice(FUNCTIONS)]
    for option, values in FUNCTION_OPTIONS.items():
        if rng.random() < 0.3:
            args += [option] if values is None else [option, rng.choice(values)]
    for option in FILE_OPTIONS:
        if rng.random() < 0.3:
            args += [
                option,
                rng.choice(
                    [
                        f"{scratch}/script-{rng.randrange(4)}",
                        f"{scratch}/nodes",
                        f"{scratch}/missing",
                        scratch,
                        "relative",
                        "/proc/999999999/fd/0",
                        "/dev/zero",
                        "",
                    ]
                ),
            ]
    return args


def cli_fault(args: list[str], rc: int, out: str, err: str) -> str | None:
    """What is wrong with dacctl's answer, or None: never a traceback; a failure exits non-zero
    with one line (stdout for --function, Slurm's protocol; stderr otherwise)."""
    if "Traceback" in out + err:
        return "a traceback"
    if rc == 0:
        return None
    function = any(a.startswith("--fu") for a in args)
    said = out if function else err
    if function and (rc != 1 or err):
        return f"--function: exit {rc}, stderr {err[:200]!r}"
    if not said.endswith("\n") or said.count("\n") != 1:
        return f"exit {rc}, not one line: {said[:300]!r}"
    if "internal error" in said:
        return f"internal error: {said[:300]!r}"
    return None


# -- etcd records --------------------------------------------------------------------------------


def bad_values(rng: random.Random, good: dict) -> list[bytes]:
    """Malformed and wrongly typed versions of the record `good`: not JSON, not UTF-8, not an
    object, each field missing, of another type, huge, or holding hostile text."""
    out = [
        b"",
        b"{",
        b"\xff\xfe",
        b"null",
        b"[]",
        b"7",
        b'"x"',
        b"{}",
        b'{"a": NaN}',
        json.dumps(good).encode()[:-1],
        b"\x00" * 10,
        b"[" * 10000 + b"]" * 10000,
    ]
    odd = [
        None,
        True,
        -1,
        1 << 70,
        1.5,
        "",
        "x" * 100000,
        [],
        {},
        ["x"],
        {"x": 1},
        "\udcff",
        "{{ lookup('pipe','id') }}",
        "../../etc",
    ]
    for key in good:
        doc = dict(good)
        del doc[key]
        out.append(json.dumps(doc).encode())
        for _ in range(3):
            doc = dict(good)
            doc[key] = rng.choice(odd)
            out.append(json.dumps(doc).encode("utf-8", "surrogateescape"))
    return out


ODD_NAMES = ["", "x/y", "..", "a" * 3000, "\udcff", "{{x}}", " ", "-", "x\ny", "ü"]


def summary(faults: list[str], examples: int = 3) -> str:
    """The faults grouped by their first words, with a few examples: a failure's message."""
    kinds: dict[str, list[str]] = {}
    for f in faults:
        kinds.setdefault(f.split(":", 1)[0][:60], []).append(f)
    return f"{len(faults)} faults:\n" + "\n".join(
        f"- {len(v)} x {k}:\n  " + "\n  ".join(x[:600] for x in v[:examples])
        for k, v in kinds.items()
    )

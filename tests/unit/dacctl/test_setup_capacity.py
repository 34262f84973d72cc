"""setup checks the `--capacity POOL:SIZE` Slurm passes against the script as dac reads it
(daccore/services/slurm_steps.py, _agrees_with_slurm)."""

import pytest

from daccore.errors import AdminError
from daccore.rules.directives import parse_script
from daccore.services.slurm_args import Refused, capacity
from daccore.services.slurm_steps import _agrees_with_slurm

GIB = 1 << 30


class Pools:
    """A store that knows only its pools' names."""

    def __init__(self, *names):
        self.names = names

    def pools(self):
        return dict.fromkeys(self.names)


def script(*lines):
    return parse_script("#!/bin/sh\n" + "".join(line + "\n" for line in lines), "DW")


@pytest.mark.parametrize(
    "value,expected",
    [
        ("default:600MiB", ("default", 600 << 20)),  # burst_buffer/datawarp: bb_get_size_str
        ("default:1073741824", ("default", GIB)),  # burst_buffer.lua: bytes
        ("(null):0", ("(null)", 0)),  # burst_buffer.lua, a job accounting nothing
        ("a:b:1GiB", ("a:b", GIB)),
    ],
)
def test_slurms_capacity_is_read_as_slurm_prints_it(value, expected):
    assert capacity(value) == expected


@pytest.mark.parametrize("value", ["x", "default:x", "default:-1", "default:1.5GiB", ":"])
def test_a_capacity_slurm_never_prints_is_refused_in_one_line(value):
    with pytest.raises(Refused) as e:
        capacity(value)
    assert str(e.value).startswith(f"--capacity {value!r}: ") and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "value,lines,default",
    [
        ("default:600MiB", ["#DW jobdw capacity=600MiB pool=default"], None),
        # rounded up to the pool's granularity (lua), swap added (datawarp)
        ("default:1073741824", ["#DW jobdw capacity=600MiB pool=default"], None),
        ("fast:2GiB", ["#DW jobdw capacity=1GiB", "#DW swap 1GiB"], "fast"),
        # no pool= and no default_pool: the only pool
        ("default:1GiB", ["#DW jobdw capacity=1GiB"], None),
        # burst_buffer.lua: the last capacity= line's pool, every line's size
        (
            "other:3GiB",
            [
                "#DW jobdw capacity=1GiB pool=default",
                "#DW create_persistent name=p capacity=2GiB pool=other",
            ],
            None,
        ),
        # nothing accounted, nothing allocated
        ("(null):0", ["#DW persistentdw name=p"], None),
        ("default:0", ["#DW persistentdw name=p"], None),
    ],
)
def test_setup_goes_on_when_slurm_and_the_script_agree(value, lines, default):
    _agrees_with_slurm(value, script(*lines), default, Pools("default"))


@pytest.mark.parametrize(
    "value,lines,default,says",
    [
        (
            "default:512MiB",
            ["#DW jobdw capacity=600MiB pool=default"],
            None,
            "setup: Slurm's --capacity default:512MiB disagrees with the script's jobdw (line 2: "
            "600MiB in pool 'default'): Slurm accounts less than dac would allocate",
        ),
        (
            "fast:1GiB",
            ["#DW jobdw capacity=1GiB"],
            "default",
            "setup: Slurm's --capacity fast:1GiB disagrees with the script's jobdw (line 2: 1GiB "
            "in pool 'default'): a different pool: burst_buffer.conf's DefaultPool and dac.yaml's "
            "default_pool must name the same one",
        ),
        (
            "(null):0",
            [
                "#DW stage_in type=file source=/a destination=$DW_JOB_STRIPED/a",
                "#BB jobdw capacity=1GiB pool=default",
            ],
            None,
            "setup: Slurm's --capacity (null):0 disagrees with the script's jobdw (line 3: 1GiB "
            "in pool 'default'): Slurm accounts less than dac would allocate",
        ),
        (
            "default:1GiB",
            ["#BB_LUA jobdw capacity=1GiB pool=default"],
            None,
            "setup: Slurm accounts --capacity default:1GiB for the job, but dac reads no jobdw in "
            "its script: dac.yaml's lua_directive must be burst_buffer.conf's Directive",
        ),
    ],
)
def test_setup_refuses_when_slurm_and_the_script_disagree_naming_both(value, lines, default, says):
    with pytest.raises(AdminError) as e:
        _agrees_with_slurm(value, script(*lines), default, Pools("default", "fast"))
    assert str(e.value) == says

import pytest

from daccore.errors import ConfigError
from daccore.settings.config import load_config
from daccore.share import asset


def write(tmp_path, text):
    p = tmp_path / "dac.yaml"
    p.write_text(text)
    return str(p)


GOOD = """
etcd: {endpoints: ["10.0.0.1:2379"]}
pools:
  default: {granularity: 1TiB}
  fast: {granularity: 500GB, backend: lustre, lustre: {mgs: per_buffer, lnet_suffix: "@o2ib1"}}
hosts:
  dac1:
    bricks:
      - {device: /dev/nvme0n1, capacity: 1.4TB}
      - {device: /dev/nvme1n1, capacity: 1TiB, pool: default, socket: 1, pcie_switch: sw2}
"""


def test_good_config_loads_with_sizes_in_bytes(tmp_path):
    cfg = load_config(write(tmp_path, GOOD), env={})
    assert cfg.pools["default"].granularity == 1024**4
    assert cfg.pools["fast"].effective_placement.value == "across_servers"
    assert cfg.pools["default"].effective_placement.value == "single_host"
    b = cfg.hosts["dac1"].bricks
    assert b[0].capacity == 1_400_000_000_000 and b[0].brick_name == "nvme0n1"
    assert b[1].socket == 1 and b[1].pcie_switch == "sw2"
    assert cfg.etcd.urls == ["http://10.0.0.1:2379"]


def test_backend_settings_give_nids_and_ranks(tmp_path):
    cfg = load_config(
        write(
            tmp_path,
            """
pools:
  l: {granularity: 1G, backend: lustre, lustre: {mgs: {host: mgs1, nid: 10.0.0.9@o2ib1},
      lnet_suffix: "-opa@o2ib1", tuning: io500, mdt_size: 100MiB}}
  d: {granularity: 1T, backend: daos, daos: {provider: ofi+cxi, targets: 24, nr_xs_helpers: 6}}
hosts:
  dac1: {daos_ranks: {0: 0, 1: 1}, bricks: [{device: /dev/a, capacity: 1G, pool: l},
                                           {device: /dev/b, capacity: 1T, pool: d, socket: 1}]}
  dac2: {lnet_nid: 10.0.0.2@o2ib1, bricks: [{device: /dev/a, capacity: 1G, pool: l}]}
""",
        ),
        env={},
    )
    assert cfg.lnet_nid("dac1", "l") == "dac1-opa@o2ib1"
    assert cfg.lnet_nid("dac2", "l") == "10.0.0.2@o2ib1"
    lustre, daos = cfg.pools["l"].lustre, cfg.pools["d"].daos
    assert lustre is not None and daos is not None
    assert not isinstance(lustre.mgs, str) and lustre.mgs.nid == "10.0.0.9@o2ib1"
    assert lustre.mdt_size == 100 * 1024**2
    assert daos.targets == 24 and cfg.hosts["dac1"].daos_ranks[1] == 1


def test_missing_default_file_means_defaults():
    cfg = load_config(None, env={"DAC_CONFIG": ""})
    assert cfg.etcd.urls == ["http://127.0.0.1:2379"]


def test_dac_endpoints_win_over_etcdctl_endpoints_over_file(tmp_path):
    path = write(tmp_path, GOOD)
    env = {"ETCDCTL_ENDPOINTS": "a:1,b:2"}
    assert load_config(path, env=env).etcd.urls == ["http://a:1", "http://b:2"]
    env["DAC_ETCD_ENDPOINTS"] = "https://c:3"
    assert load_config(path, env=env).etcd.urls == ["https://c:3"]


def test_etcdctl_tls_files_turn_on_https_for_bare_endpoints(tmp_path):
    env = {
        "ETCDCTL_ENDPOINTS": "c:3",
        "ETCDCTL_CACERT": "/ca.pem",
        "ETCDCTL_CERT": "/c.pem",
        "ETCDCTL_KEY": "/k.pem",
    }
    etcd = load_config(write(tmp_path, GOOD), env=env).etcd
    assert etcd.urls == ["https://c:3"]
    assert (etcd.cacert, etcd.cert, etcd.key) == ("/ca.pem", "/c.pem", "/k.pem")


def test_dac_config_env_names_the_file(tmp_path):
    cfg = load_config(None, env={"DAC_CONFIG": write(tmp_path, GOOD)})
    assert "dac1" in cfg.hosts


@pytest.mark.parametrize(
    "text,message",
    [
        ("pools: {fast: {granularity: lots}}", "pools.fast.granularity: must be a size like 1TiB"),
        (
            "pools: {fast: {granularity: 0}}",
            "pools.fast.granularity: input should be greater than 0",
        ),
        ("pools: {fast: {granularity: -1}}", "pools.fast.granularity: must be a size"),
        (
            "pools: {d: {granularity: 1G}}\nhosts: {h: {bricks: [{device: /dev/x, capacity: 1G, "
            "pool: nope}]}}",
            "hosts.h.bricks[0].pool: unknown pool 'nope' (pools: d)",
        ),
        (
            "pools: {d: {granularity: 1G}}\nhosts: {h: {bricks: [{device: /dev/x, capacity: 0}]}}",
            "hosts.h.bricks[0].capacity: input should be greater than 0",
        ),
        (
            "pools: {d: {granularity: 1G}}\nhosts: {h: {bricks: [{device: /dev/x, capacity: 1G, "
            "pool: d}, {device: /dev/x, capacity: 1G, pool: d}]}}",
            "hosts.h.bricks[1].device: '/dev/x' is listed twice (also bricks[0])",
        ),
        (
            "pools: {d: {granularity: 1G}}\nhosts: {h: {bricks: [{device: /dev/a/x, capacity: 1G, "
            "pool: d}, {device: /dev/b/x, capacity: 1G, pool: d}]}}",
            "hosts.h.bricks[1].name: 'x' is listed twice",
        ),
        (
            "pools: {d: {granularity: 2G}}\nhosts: {h: {bricks: [{device: /dev/x, capacity: 1G, "
            "pool: d}]}}",
            "smaller than pool 'd' granularity",
        ),
        ("pools: {d: {granularity: 1G, colour: red}}", "pools.d.colour: extra inputs are not"),
        ("pools: {d: {granularity: 1G, backend: nfs}}", "pools.d.backend: input should be 'local'"),
        (
            "pools: {d: {granularity: 1G, backend: lustre}}",
            "pools.d: lustre: missing: backend lustre needs its settings",
        ),
        (
            "pools: {d: {granularity: 1G, backend: lustre, lustre: {lnet_suffix: '@tcp'}}}",
            "pools.d.lustre.mgs: field required",
        ),
        (
            "pools: {d: {granularity: 1G, backend: lustre, lustre: {mgs: {host: m}}}}",
            "pools.d.lustre.mgs.shared.nid: field required",
        ),
        (
            "pools: {d: {granularity: 1G, lustre: {mgs: per_buffer}}}",
            "pools.d: lustre: settings for backend lustre, but the pool's backend is local",
        ),
        (
            "pools: {d: {granularity: 1G, backend: lustre, lustre: {mgs: per_buffer, mdt_size: "
            "2G}}}",
            "pools.d: lustre.mdt_size: 2GiB leaves no room for an OST in a brick of 1GiB",
        ),
        (
            "pools: {d: {granularity: 8GiB, backend: daos, daos: {targets: 16}}}",
            "pools.d: daos.targets: 16 targets need at least 16GiB per brick (DAOS: 1GiB of "
            "NVMe per "
            "target); the granularity is 8GiB",
        ),
        (
            "pools: {d: {granularity: 16GiB, backend: daos, daos: {targets: 16, scm_percent: 1}}}",
            "pools.d: daos.scm_percent: 1 % of a brick of 16GiB gives 165MiB of SCM, and 16 "
            "targets "
            "need at least 256MiB (DAOS: 16MiB of SCM per target)",
        ),
        (
            "pools: {d: {granularity: 1G, backend: lustre, lustre: {mgs: per_buffer, release: "
            "'2.14'}}}",
            "pools.d.lustre.release: input should be '2.15' or '2.16'",
        ),
        (
            "pools: {d: {granularity: 1T, backend: daos, daos: {}, swap: true}}",
            "pools.d: swap: the daos backend offers no swap",
        ),
        (
            "pools: {d: {granularity: 1T, backend: daos, daos: {provider: tcp}}}",
            "pools.d.daos.provider: string should match",
        ),
        (
            "pools: {d: {granularity: 1T, backend: lustre, lustre: {mgs: per_buffer}}}\n"
            "hosts: {h: {bricks: [{device: /dev/x, capacity: 1T, pool: d}]}}",
            "hosts.h.lnet_nid: missing: its bricks are in lustre pool 'd', which sets no "
            "lnet_suffix",
        ),
        (
            "pools: {d: {granularity: 1T, backend: daos, daos: {}}}\n"
            "hosts: {h: {daos_ranks: {0: 3}, bricks: [{device: /dev/x, capacity: 1T, pool: d, "
            "socket: 1}]}}",
            "hosts.h.daos_ranks: no DAOS rank for socket 1 (brick x of daos pool 'd')",
        ),
        ("pools: [\n  bad", "line 2"),
        ("- a list", "the top level must be a mapping"),
        ("etcd: {endpoints: []}", "etcd.endpoints: list should have at least 1 item"),
    ],
)
def test_bad_config_is_one_line_naming_the_field(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(path, env={})
    line = str(e.value)
    assert "\n" not in line
    assert line.startswith(f"invalid config {path}: ")
    assert message.lower() in line.lower()


def test_explicit_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(str(tmp_path / "absent.yaml"), env={})


def _fields(model, seen=None):
    """Every setting name of a settings model and the models inside it."""
    import typing

    from pydantic import BaseModel

    seen = set() if seen is None else seen
    for name, field in model.model_fields.items():
        seen.add(name)
        for arg in typing.get_args(field.annotation) + (field.annotation,):
            for inner in (arg, *typing.get_args(arg)):
                for t in (inner, *typing.get_args(inner)):
                    if isinstance(t, type) and issubclass(t, BaseModel) and t is not model:
                        _fields(t, seen)
    return seen


def test_the_sample_config_is_valid_and_shows_every_setting():

    from daccore.settings.config import DacConfig

    sample = asset("packaging", "dac.yaml")
    cfg = load_config(str(sample), env={})
    assert set(cfg.pools) == {"default", "fast", "objects"}
    text = sample.read_text()
    missing = sorted(f for f in _fields(DacConfig) if f"{f}:" not in text)
    assert missing == []


def test_a_big_config_is_parsed_apart_and_means_the_same(tmp_path):
    """A site of 800 servers x 24 bricks (1.1 MB of YAML) is parsed in a child process (the
    parse's memory stays there); a mistake in one is still one line naming its line."""
    hosts = "".join(
        f"  s{h}:\n    bricks:\n"
        + "".join(
            f"    - {{device: /dev/nvme{b}n1, capacity: 1TiB, socket: {b % 2}}}\n"
            for b in range(24)
        )
        for h in range(800)
    )
    text = "pools:\n  default: {granularity: 1TiB}\nhosts:\n" + hosts
    from daccore.settings import config as config_module

    assert len(text) > config_module._BIG_FILE
    c = load_config(write(tmp_path, text), env={})
    assert len(c.hosts) == 800 and c.hosts["s799"].bricks[23].device == "/dev/nvme23n1"
    with pytest.raises(ConfigError, match=r"dac.yaml: line [0-9]+: "):
        load_config(write(tmp_path, text.replace("hosts:\n  s0:", "hosts:\n  s0: [\n")), env={})

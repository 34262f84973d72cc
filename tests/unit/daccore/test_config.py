import pytest

from daccore.config import load_config
from daccore.errors import ConfigError


def write(tmp_path, text):
    p = tmp_path / "dac.yaml"
    p.write_text(text)
    return str(p)


GOOD = """
etcd: {endpoints: ["10.0.0.1:2379"]}
pools:
  default: {granularity: 1TiB}
  fast: {granularity: 500GB, backend: lustre}
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
    env = {"ETCDCTL_ENDPOINTS": "c:3", "ETCDCTL_CACERT": "/ca.pem", "ETCDCTL_CERT": "/c.pem",
           "ETCDCTL_KEY": "/k.pem"}
    etcd = load_config(write(tmp_path, GOOD), env=env).etcd
    assert etcd.urls == ["https://c:3"]
    assert (etcd.cacert, etcd.cert, etcd.key) == ("/ca.pem", "/c.pem", "/k.pem")


def test_dac_config_env_names_the_file(tmp_path):
    cfg = load_config(None, env={"DAC_CONFIG": write(tmp_path, GOOD)})
    assert "dac1" in cfg.hosts


@pytest.mark.parametrize("text,message", [
    ("pools: {fast: {granularity: lots}}", "pools.fast.granularity: must be a size like 1TiB"),
    ("pools: {fast: {granularity: 0}}", "pools.fast.granularity: input should be greater than 0"),
    ("pools: {fast: {granularity: -1}}", "pools.fast.granularity: must be a size"),
    ("pools: {d: {granularity: 1G}}\nhosts: {h: {bricks: [{device: /dev/x, capacity: 1G, "
     "pool: nope}]}}", "hosts.h.bricks[0].pool: unknown pool 'nope' (pools: d)"),
    ("pools: {d: {granularity: 1G}}\nhosts: {h: {bricks: [{device: /dev/x, capacity: 0}]}}",
     "hosts.h.bricks[0].capacity: input should be greater than 0"),
    ("pools: {d: {granularity: 1G}}\nhosts: {h: {bricks: [{device: /dev/x, capacity: 1G, "
     "pool: d}, {device: /dev/x, capacity: 1G, pool: d}]}}",
     "hosts.h.bricks[1].device: '/dev/x' is listed twice (also bricks[0])"),
    ("pools: {d: {granularity: 1G}}\nhosts: {h: {bricks: [{device: /dev/a/x, capacity: 1G, "
     "pool: d}, {device: /dev/b/x, capacity: 1G, pool: d}]}}",
     "hosts.h.bricks[1].name: 'x' is listed twice"),
    ("pools: {d: {granularity: 2G}}\nhosts: {h: {bricks: [{device: /dev/x, capacity: 1G, "
     "pool: d}]}}", "smaller than pool 'd' granularity"),
    ("pools: {d: {granularity: 1G, colour: red}}", "pools.d.colour: extra inputs are not"),
    ("pools: {d: {granularity: 1G, backend: nfs}}", "pools.d.backend: input should be 'local'"),
    ("pools: [\n  bad", "line 2"),
    ("- a list", "the top level must be a mapping"),
    ("etcd: {endpoints: []}", "etcd.endpoints: list should have at least 1 item"),
])
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

import os

import pytest

from daccore.errors import ConfigError
from daccore.settings import cache as config_cache
from daccore.settings.config import load_config


@pytest.fixture
def site(tmp_path):
    cfg = tmp_path / "dac.yaml"
    cfg.write_text(
        "etcd: {endpoints: ['10.0.0.1:2379']}\npools: {default: {granularity: 1GiB}}\n"
        "mount_root: /mnt/bb\n"
    )
    cache = tmp_path / "cache"
    return str(cfg), {"DAC_CACHE_DIR": str(cache)}, cache


def test_same_settings_as_the_validated_config(site):
    cfg, env, _ = site
    s = config_cache.load_settings(cfg, env)
    full = load_config(cfg, env={})
    assert s["etcd"]["urls"] == full.etcd.urls == ["http://10.0.0.1:2379"]
    assert s["pools"]["default"]["granularity"] == 1 << 30 and s["mount_root"] == "/mnt/bb"


def test_the_second_read_comes_from_the_cache_and_an_edit_refreshes_it(site):
    cfg, env, cache = site
    config_cache.load_settings(cfg, env)
    (cached,) = cache.iterdir()
    assert oct(cached.stat().st_mode & 0o777) == "0o600"
    stamp = cached.stat().st_mtime_ns
    assert config_cache.load_settings(cfg, env)["mount_root"] == "/mnt/bb"
    assert cached.stat().st_mtime_ns == stamp  # read, not rewritten
    with open(cfg, "a") as f:
        f.write("default_pool: default\n")
    assert config_cache.load_settings(cfg, env)["default_pool"] == "default"


def test_the_environment_is_applied_on_every_read_not_cached(site):
    cfg, env, _ = site
    config_cache.load_settings(cfg, env)
    s = config_cache.load_settings(
        cfg, {**env, "DAC_ETCD_ENDPOINTS": "e:1", "ETCDCTL_CACERT": "/ca"}
    )
    assert s["etcd"]["urls"] == ["https://e:1"]
    assert config_cache.load_settings(cfg, env)["etcd"]["urls"] == ["http://10.0.0.1:2379"]


def test_a_cache_others_can_write_is_ignored(site):
    cfg, env, cache = site
    config_cache.load_settings(cfg, env)
    (cached,) = cache.iterdir()
    cached.write_text('{"identity": null, "config": {"mount_root": "/evil"}}')
    os.chmod(cached, 0o666)
    assert config_cache.load_settings(cfg, env)["mount_root"] == "/mnt/bb"


def test_an_invalid_file_is_still_one_line(site):
    cfg, env, _ = site
    with open(cfg, "w") as f:
        f.write("pools: {default: {granularity: lots}}\n")
    with pytest.raises(ConfigError, match="pools.default.granularity: must be a size"):
        config_cache.load_settings(cfg, env)


def test_a_cache_written_by_other_code_is_not_served(site, monkeypatch):
    cfg, env, cache = site
    config_cache.load_settings(cfg, env)
    (cached,) = cache.iterdir()
    cached.write_text(cached.read_text().replace("/mnt/bb", "/stale"))
    assert config_cache.load_settings(cfg, env)["mount_root"] == "/stale"  # same code: served
    monkeypatch.setattr(config_cache, "_VERSION", config_cache._VERSION + 1)
    assert config_cache.load_settings(cfg, env)["mount_root"] == "/mnt/bb"  # new code: revalidated


def test_the_config_view_reads_as_the_model(tmp_path):
    # the sample config, every setting the view has given a value other than its default
    cfg = tmp_path / "dac.yaml"
    cfg.write_text(
        "etcd: {endpoints: ['10.0.0.1:2379']}\n"
        "pools:\n  default: {granularity: 1GiB}\n"
        "  fast: {granularity: 100GiB, backend: lustre, lustre: {mgs: per_buffer}}\n"
        "default_pool: fast\nlua_directive: BB\nstep_timeout: 123\nstage_timeout: 456\n"
        "restart_grace: 7\n"
    )
    env = {"DAC_CACHE_DIR": str(tmp_path / "cache")}
    model = load_config(str(cfg), env={})
    for data in (
        config_cache.load_settings(str(cfg), env),
        config_cache.load_settings(str(cfg), env),
    ):
        view = config_cache.ConfigView(data)  # the second read is the cached copy
        names = [n for n in config_cache.ConfigView.__slots__ if not n.startswith("_")]
        for name in names:
            assert getattr(view, name) == getattr(model, name), name
        assert view.own_mgs_pools() == model.own_mgs_pools() == {"fast"}
        assert view.default_pool == "fast" and view.step_timeout == 123

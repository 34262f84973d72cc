"""No string dacd hands a playbook is rendered as Jinja (docs/security.md, "dacd trusts nothing
it reads"): real playbooks run through dacd.runner, cold and through the warm Ansible server,
get `{{ }}`, `{% %}` and `{# #}` in their extra-vars and inventory vars literally, and no
lookup runs. Admin-written config vars (daccore.backends.Templated) are still templated."""

import os
import time

import pytest

from daccore.backends import templated
from dacd import runner
from dacd.warm_ansible import WarmAnsible

PLAY = """- hosts: all
  gather_facts: false
  tasks:
    - name: write what the playbook was given
      copy:
        dest: "{{ out }}/{{ item.0 }}"
        content: "{{ item.1 }}"
        mode: "0600"
      loop:
        - ["extravar", "{{ value }}"]
        - ["nested", "{{ nested.inner[0].text }}"]
        - ["argv", "{{ argv | join(' ') }}"]
        - ["hostvar", "{{ hostvalue }}"]
        - ["admin", "{{ admin }}"]
    - name: a module argument straight from a variable
      command:
        argv: "{{ ['echo'] + argv }}"
"""


def payloads(out):
    return {
        "value": f"{{{{ lookup('pipe', 'touch {out}/pwned-value') }}}}",
        "nested": f"{{% set x = lookup('pipe', 'touch {out}/pwned-nested') %}}x{{{{ x }}}}",
        "argv": f"{{# c #}}{{{{ lookup('pipe', 'touch {out}/pwned-argv') }}}}",
        "host": f"{{{{ query('pipe', 'touch {out}/pwned-host') }}}}",
    }


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "playbooks" / "probe").mkdir(parents=True)
    (tmp_path / "playbooks" / "probe" / "show.yml").write_text(PLAY)
    monkeypatch.setattr(runner, "playbooks", lambda: tmp_path / "playbooks")
    out = tmp_path / "out"
    out.mkdir()
    return out


@pytest.fixture
def warm(tmp_path):
    log = open(tmp_path / "warm.log", "w+")
    server = WarmAnsible(log=log)
    server.ensure()
    for _ in range(100):
        if os.path.exists(server.socket):
            break
        time.sleep(0.05)
    yield server
    server.stop()
    log.close()


def run_probe(out, warm=None):
    p = payloads(out)
    extravars = {
        "out": str(out),
        "value": p["value"],
        "nested": {"inner": [{"text": p["nested"]}]},
        "argv": [p["argv"]],
        "admin": templated("{{ 'made by the config' | upper }}"),
    }
    inventory = {
        "all": {"hosts": {"localhost": {"ansible_connection": "local", "hostvalue": p["host"]}}}
    }
    runner.run_step("probe", "show", "localhost", extravars, inventory=inventory, warm=warm)
    return p


@pytest.mark.parametrize("how", ["cold", "warm"])
def test_dacdtrust_playbooks_get_record_values_literally(project, request, how):
    out = project
    p = run_probe(out, request.getfixturevalue("warm") if how == "warm" else None)
    assert sorted(f.name for f in out.iterdir() if f.name.startswith("pwned")) == []
    assert (out / "extravar").read_text() == p["value"]
    assert (out / "nested").read_text() == p["nested"]
    assert (out / "argv").read_text() == p["argv"]
    assert (out / "hostvar").read_text() == p["host"]
    # the admin's config vars keep their templating
    assert (out / "admin").read_text() == "MADE BY THE CONFIG"

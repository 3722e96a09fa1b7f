"""hosts backend on real networks, without SSH: inventory values validated; `down`
restoring the recorded qdiscs, naming a host it cannot reach, touching nothing when the
run never reached its hosts (ssh and ansible-runner replaced by fakes)."""

import json
import re
from pathlib import Path

import pytest

from common.errors import ConfigError
from testbed import Topology, qdisc
from testbed.backends import hosts, inventory, provision, remote
from testbed.backends.ssh import SSH


@pytest.fixture
def key(tmp_path):
    path = tmp_path / "id_ed25519"
    path.write_text("x")
    return path


def _good(key):
    return {
        "e0": {"ansible_host": "10.77.0.11", "ansible_ssh_private_key_file": str(key)},
        "ep": {"ansible_host": "10.77.0.10", "ansible_ssh_private_key_file": str(key)},
    }


def test_a_good_inventory_passes(key):
    inventory.validate_inventory(_good(key), ["e0", "ep"])
    inv = _good(key)
    inv["e0"].update(ansible_port="2222", ansible_user="pi", edgetb_address="10.77.0.11")
    inv["ep"].update(ansible_port=22, ansible_user="root", edgetb_known_hosts=str(key))
    inventory.validate_inventory(inv, ["e0", "ep"])


@pytest.mark.parametrize(
    "var, value, message",
    [
        ("ansible_host", "board-a.local", "e0: ansible_host 'board-a.local' is not an IPv4"),
        ("ansible_host", "-oProxyCommand=x", "e0: ansible_host '-oProxyCommand=x' is not an"),
        ("ansible_host", "10.77.0.256", "is not an IPv4 address"),
        ("ansible_host", "0.0.0.0", "e0: ansible_host '0.0.0.0' is not a host address"),
        ("ansible_host", "224.0.0.1", "is not a host address"),
        ("edgetb_address", "10.77.0", "e0: edgetb_address '10.77.0' is not an IPv4"),
        ("ansible_port", 0, "e0: ansible_port '0' is not a port (1..65535)"),
        ("ansible_port", 65536, "ansible_port '65536' is not a port"),
        ("ansible_port", "22x", "ansible_port '22x' is not a port"),
        ("ansible_port", "-1", "ansible_port '-1' is not a port"),
        ("ansible_port", True, "ansible_port 'True' is not a port"),
        ("ansible_port", 22.5, "ansible_port '22.5' is not a port"),
        ("ansible_user", "-oProxyCommand=x", "e0: ansible_user '-oProxyCommand=x' starts with"),
        ("ansible_user", "pi root", "e0: ansible_user 'pi root' contains whitespace"),
        ("ansible_user", "pi\n", "contains whitespace"),
        ("ansible_user", "", "e0: ansible_user '' is empty"),
        ("ansible_ssh_private_key_file", "/nonexistent/key", "'/nonexistent/key' is not a file"),
        ("edgetb_known_hosts", "/nonexistent/kh", "e0: edgetb_known_hosts '/nonexistent/kh'"),
    ],
)
def test_bad_values_are_one_line_naming_host_variable_and_value(key, var, value, message):
    inv = _good(key)
    inv["e0"][var] = value
    with pytest.raises(ConfigError) as err:
        inventory.validate_inventory(inv, ["e0", "ep"], "inv.yml")
    text = str(err.value)
    assert message in text and text.startswith("inv.yml: ") and "\n" not in text


def test_every_problem_reported_at_once_and_missing_values_named(key):
    inv = _good(key)
    del inv["e0"]["ansible_host"]
    inv["ep"]["ansible_port"] = 99999
    inv["ep"].pop("ansible_ssh_private_key_file")
    with pytest.raises(ConfigError) as err:
        inventory.validate_inventory(inv, ["e0", "ep"])
    text = str(err.value)
    assert "e0: ansible_host is missing" in text
    assert "ep: ansible_port '99999' is not a port" in text
    assert "ep: ansible_ssh_private_key_file is missing" in text


def test_hosts_the_run_does_not_use_are_not_checked(key):
    inv = {**_good(key), "spare": {"ansible_host": "not-an-address"}}
    inventory.validate_inventory(inv, ["e0", "ep"])


def test_load_validates_before_matching_the_topology(tmp_path, key):
    inv = _good(key)
    inv["ep"]["ansible_user"] = "-l"
    path = tmp_path / "inv.json"
    path.write_text(json.dumps({"all": {"hosts": inv}}))
    with pytest.raises(ConfigError, match="ep: ansible_user '-l' starts with '-'"):
        hosts.HostsBackend.check_options(Topology(edge_nodes=1), {"inventory": str(path)})
    inv["ep"]["ansible_user"] = "pi"
    inv["e0"]["edgetb_known_hosts"] = str(key)
    path.write_text(json.dumps({"all": {"hosts": inv}}))
    loaded = inventory.load(Topology(edge_nodes=1), {"inventory": str(path)})
    assert loaded.known_hosts == key and loaded.hosts["ep"].user == "pi"


# -- down on the hosts (SSH and ansible-runner replaced by fakes) ----------------------------

DEFAULT = "qdisc fq_codel 0: root refcnt 2 limit 10240p flows 1024 quantum 1514\n"
SHAPED = "qdisc htb 1a37: root refcnt 2 r2q 10 default 0x1\nqdisc netem 2007: parent 1a37:7\n"


class FakeHostsBackend(hosts.HostsBackend):
    """The hosts backend with what its fake hosts and ansible-runner hold."""

    qdiscs: dict[str, str]  # address -> what `tc qdisc show` prints now
    unreachable: set[str]  # addresses SSH cannot reach
    playbooks: list[str]  # the playbooks run, in order


@pytest.fixture
def backend(tmp_path, key, monkeypatch):
    from testbed.state import RunState

    path = tmp_path / "inv.json"
    path.write_text(json.dumps({"all": {"hosts": _good(key)}}))
    state = RunState(
        run_id="abc123",
        backend="hosts",
        topology=Topology(edge_nodes=1).to_dict(),
        cassandra=None,
        options={"inventory": str(path)},
        run_dir=tmp_path / "run",
    )
    state.run_dir.mkdir()
    monkeypatch.setattr(SSH, "close", lambda self, hosts: None)
    b = FakeHostsBackend(Topology(edge_nodes=1), state)
    b.qdiscs = {"10.77.0.11": SHAPED, "10.77.0.10": SHAPED}
    b.unreachable = set()
    b.playbooks = []

    def fake_run(argv, check=True, timeout=None):
        import subprocess

        from common.errors import CommandError

        address = next(a.split("@")[1] for a in argv if "@" in a)
        if address in b.unreachable:
            raise CommandError(argv, 255, "", f"ssh: connect to host {address}: No route")
        command = argv[-1]
        if "qdisc show" in command:
            return subprocess.CompletedProcess(argv, 0, b.qdiscs[address], "")
        if "qdisc del" in command:
            b.qdiscs[address] = DEFAULT
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(hosts, "run", fake_run)

    def fake_playbook(name, **kw):
        b.playbooks.append(name)
        return 0.1  # seconds

    monkeypatch.setattr(provision, "playbook", fake_playbook)
    return b


def _shaped(b):
    b.state.put(hosts.HostsRecord(touched=True))
    b.state.put(qdisc.QdiscRecord({"e0": {"eth0": DEFAULT}, "ep": {"eth0": DEFAULT}}))


def test_down_restores_the_recorded_qdisc_on_every_host(backend):
    _shaped(backend)
    backend.destroy()
    assert backend.qdiscs == {"10.77.0.11": DEFAULT, "10.77.0.10": DEFAULT}
    assert backend.playbooks == ["teardown"]


def test_down_with_an_unreachable_host_is_an_error_naming_it(backend):
    _shaped(backend)
    backend.unreachable = {"10.77.0.11"}
    with pytest.raises(hosts.TeardownError) as err:
        backend.destroy()
    text = str(err.value)
    assert "e0: qdiscs of eth0 not restored (ssh: connect to host 10.77.0.11: No route)" in text
    assert "before the run they were: 'qdisc fq_codel 0: root limit 10240p" in text
    assert "ep:" not in text and backend.qdiscs["10.77.0.10"] == DEFAULT  # the rest done
    assert backend.playbooks == ["teardown"]


def test_down_of_a_run_that_never_reached_its_hosts_touches_nothing(backend):
    backend.destroy()  # e.g. refused a host key: nothing to undo there
    assert backend.playbooks == [] and backend.qdiscs["10.77.0.11"] == SHAPED


def test_a_failed_teardown_playbook_is_reported(backend, monkeypatch):
    backend.state.put(hosts.HostsRecord(touched=True))

    def failing(name, **kw):
        raise provision.ProvisionError(f"playbook {name} did not complete:\nep: unreachable")

    monkeypatch.setattr(provision, "playbook", failing)
    with pytest.raises(hosts.TeardownError, match="ep: unreachable"):
        backend.destroy()


def test_the_teardown_playbook_leaves_qdiscs_to_the_recorded_restore():
    text = (Path(remote.__file__).parent.parent / "playbooks" / "teardown.yml").read_text()
    assert "qdisc del" not in text


def test_group_variables_count_and_a_hosts_own_win(tmp_path, key):
    """``[group:vars]`` is how an inventory says what its hosts share (Ansible merges a
    host's own variables over its groups'); read before, they were silently missing."""
    path = tmp_path / "inv.ini"
    path.write_text(
        "[edge]\ne0 ansible_host=10.77.0.11\ne1 ansible_host=10.77.0.12 ansible_port=2200\n"
        f"[edge:vars]\nansible_ssh_private_key_file={key}\nansible_port=22\n"
    )
    inv = inventory.read_inventory(path)
    assert inv["e0"]["ansible_ssh_private_key_file"] == str(key)
    assert str(inv["e0"]["ansible_port"]) == "22" and str(inv["e1"]["ansible_port"]) == "2200"
    inventory.validate_inventory(inv, ["e0", "e1"])


def _hosts_testbed(inv, home, cassandra, progress=None):
    """A one-node hosts testbed of ``inv`` under ``home`` (its checks are what is tested:
    each test makes one of them refuse before anything is made)."""
    from testbed import Testbed

    return Testbed(
        Topology(edge_nodes=1),
        "hosts",
        cassandra=cassandra,
        base=home,
        backend_options={"inventory": str(inv)},
        progress=progress,
    )


def test_a_runs_directory_too_long_for_ssh_sockets_is_refused_before_anything(
    tmp_path, key, monkeypatch
):
    # ssh's master socket is the ControlPath plus a 17-character suffix, under a 107-byte
    # limit: a run under a long EDGETB_HOME would wait out its SSH timeout on every host
    from testbed.backends.ssh import MAX_CONTROL_PATH, check_control_path

    tail = len("/000000/ssh/edgetb.run=000000:255.255.255.255")
    at_limit = Path("/" + "d" * (MAX_CONTROL_PATH - tail - 1))  # the longest that fits
    assert len(str(at_limit)) + tail == MAX_CONTROL_PATH
    check_control_path(at_limit)
    with pytest.raises(ConfigError, match="too long for SSH's control sockets"):
        check_control_path(Path(str(at_limit) + "d"))
    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps({"all": {"hosts": _good(key)}}))
    home = tmp_path / ("x" * 80)
    monkeypatch.setattr("testbed.testbed.os.geteuid", lambda: 0)  # root's check comes first
    with pytest.raises(ConfigError, match="EDGETB_HOME"):  # a good inventory: this is all
        _hosts_testbed(inv, home, None)
    assert not home.exists()  # refused before anything was made


def _sited(key, sites):
    inv = {f"e{i}": {"ansible_host": f"10.77.0.{11 + i}"} for i in range(len(sites))}
    inv["ep"] = {"ansible_host": "10.77.0.10"}
    for i, site in enumerate(sites):
        if site:
            inv[f"e{i}"]["edgetb_site"] = site
    for v in inv.values():
        v["ansible_ssh_private_key_file"] = str(key)
    return inv


def test_the_inventorys_sites_must_be_the_topologys(key):
    inv = _sited(key, ["dc1", "dc1", "dc2"])
    inventory.check_sites(Topology(edge_nodes=3, sites=(2, 1)), inv)  # as placed: fine
    inventory.check_sites(Topology(edge_nodes=3), _sited(key, [None, None, None]))  # none named
    cases = [
        (Topology(edge_nodes=3), inv, "give --sites 2,1"),
        (Topology(edge_nodes=3, sites=(1, 2)), inv, "give --sites 2,1"),
        (Topology(edge_nodes=3), _sited(key, ["dc1", None, "dc2"]), "not of e1"),
        (Topology(edge_nodes=3), _sited(key, ["dc1", "dc2", "dc1"]), "site by site"),
        (Topology(edge_nodes=3), _sited(key, ["north", "north", "south"]), "dc1, dc2 in order"),
    ]
    for topo, inv_case, message in cases:
        with pytest.raises(ConfigError, match=message) as err:
            inventory.check_sites(topo, inv_case)
        assert "\n" not in str(err.value)


def test_ports_another_run_holds_are_refused_before_anything_is_copied(backend, monkeypatch):
    """A second controller's run on hosts whose Cassandra ports a first run holds: refused
    naming the port before provisioning, which would replace the project's code that the
    first run's hosts use; the run never touched the hosts, so its down undoes nothing."""
    import subprocess

    from common import runner
    from common.errors import PortInUseError

    backend.state.cassandra = {"heap_mb": 256}  # this run starts Cassandra
    monkeypatch.setattr(type(backend), "trust_host_keys", lambda self: {})
    monkeypatch.setattr(SSH, "wait", lambda self, host, timeout_s: None)
    seen = []

    def fake_run(argv, check=True, timeout=None):
        seen.append(argv[-1])
        out = "LISTEN 0 128 10.77.0.11:9042 0.0.0.0:*\n" if "ss -Htln" in argv[-1] else ""
        return subprocess.CompletedProcess(argv, 0, out, "")

    monkeypatch.setattr(runner, "run", fake_run)
    with pytest.raises(PortInUseError, match="e0: port 9042 is already in use on 10.77.0.11"):
        backend.create()
    assert backend.playbooks == [] and seen  # asked the host, copied nothing
    rec = backend.state.get(hosts.HostsRecord)
    assert rec is not None and not rec.touched


@pytest.mark.parametrize(
    "name, text, message",
    [
        # a host that is not a mapping: Ansible kept the hosts before it, dropped the rest
        ("a.yml", "all:\n  hosts:\n    e0: {ansible_host: 10.77.0.11}\n    e1: [1, 2]\n"
         "    ep: {ansible_host: 10.77.0.10}\n", "expected dictionary and got: [1, 2], line 4"),
        # a key Ansible skips with a warning, and the hosts under it
        ("b.yml", "all:\n  hosts:\n    e0: {ansible_host: 10.77.0.11}\n  host:\n    ep: {}\n",
         "Skipping unexpected key (host) in group (all)"),
        ("c.yml", "all:\n  children:\n    edge:\n      hosts: {e0: {}}\n      vars: 5\n",
         'Invalid "vars" entry for "edge" group'),
        ("d.ini", "[edge]\ne0 ansible_host=10.77.0.11\ne1 ansible_host=10.77.0.12 junk\n",
         "got: junk, line 3"),
    ],
)  # fmt: skip
def test_an_inventory_ansible_reads_only_in_part_is_refused_naming_the_line(
    tmp_path, name, text, message
):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        inventory.read_inventory(path)
    assert "Ansible did not read all of it" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "name, text, where",
    [
        ("t.ini", "[w]\ne0 ansible_host=10.77.0.11 edgetb_worker_dir=/w{{lookup('pipe','id')}}\n",
         "host e0: edgetb_worker_dir '/w{{lookup(pipe,id)}}' holds template syntax"),
        ("t2.ini", "[w]\ne0 ansible_host=10.77.0.11\n[w:vars]\nedgetb_site=\"{% raw %}x\"\n",
         "host e0: edgetb_site '{% raw %}x' holds template syntax"),
        ("t.yml", "all:\n  hosts:\n    e0:\n      ansible_host: 10.77.0.11\n"
         "      deep: {a: [1, '{# c #}']}\n", "host e0: deep.a[1] '{# c #}' holds"),
        ("t.json", json.dumps({"all": {"hosts": {"e{{1}}": {"ansible_host": "10.77.0.11"}}}}),
         "host e{{1}}: its name 'e{{1}}' holds template syntax"),
    ],
)  # fmt: skip
def test_inventory_values_are_data_never_templates(tmp_path, name, text, where):
    """Ansible renders Jinja in the variables it uses: a lookup('pipe', ...) would run
    as root on the controller. Any string with template syntax is refused, with its line."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(where)) as info:
        inventory.read_inventory(path)
    assert ", line " in str(info.value)


def test_plain_text_on_real_hosts_must_be_meant(tmp_path, key, monkeypatch):
    """TLS is the hosts backend's default; --no-tls alone passed without a word while the
    run's login and every write crossed the hosts' network in plain text."""
    from testbed.cassandra.config import CassandraSettings

    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps({"all": {"hosts": _good(key)}}))
    monkeypatch.setattr("testbed.testbed.os.geteuid", lambda: 0)
    home = tmp_path / ("x" * 80)  # refused later for its length: nothing starts either way
    said: list[str] = []

    def up(settings):
        _hosts_testbed(inv, home, settings, said.append)

    with pytest.raises(ConfigError, match="plain text; add --plain-text"):
        up(CassandraSettings(tls=False))
    assert said == []
    with pytest.raises(ConfigError, match="EDGETB_HOME"):  # past the TLS check, with a word
        up(CassandraSettings(tls=False, plain_text=True))
    assert any("TLS is off on real hosts" in s for s in said)
    assert not home.exists()
    from experiments.settings.config import SweepConfig

    with pytest.raises(ConfigError, match="--tls plain-text if that is meant"):
        SweepConfig(backend="hosts", inventory=str(inv), tls="off", shaper="direct")
    SweepConfig(backend="hosts", inventory=str(inv), tls="plain-text", shaper="direct")


def test_a_host_and_a_group_of_one_name_is_not_a_partial_read(tmp_path, key):
    """Ansible remarks on it (a warning), and reads the whole inventory: only warnings of
    what it left out are refused."""
    path = tmp_path / "inv.ini"
    path.write_text(
        f"[edge]\ne0 ansible_host=10.77.0.11 ansible_ssh_private_key_file={key}\n"
        f"[ep]\nep ansible_host=10.77.0.10 ansible_ssh_private_key_file={key}\n"
    )
    assert sorted(inventory.read_inventory(path)) == ["e0", "ep"]

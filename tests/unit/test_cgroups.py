"""Device-sized nodes, the pure parts: flags and config values to per-host resources,
profiles, the checks made before anything starts, cpuset syntax, and the join of a
process to its host's cgroup (a real shell writing its PID, into plain files here)."""

import subprocess
from pathlib import Path

import pytest

from common.errors import ConfigError
from testbed import Topology, cgroups, resources
from testbed.backends import backend_options
from testbed.resources import Resources


def test_one_value_for_every_edge_node_or_per_host():
    assert resources.parse_flag("cpu", "0.5") == {"*": 0.5}
    assert resources.parse_flag("cpu", "e0=1,e2=0.25") == {"e0": 1.0, "e2": 0.25}
    assert resources.parse_flag("cpuset", "0,1") == {"*": "0,1"}
    assert resources.parse_flag("cpuset", "e0=0,1;e1=1") == {"e0": "0,1", "e1": "1"}
    assert resources.parse_flag("memory_mb", None) == {}
    with pytest.raises(ConfigError, match="every part is HOST=VALUE"):
        resources.parse_flag("cpuset", "e0=0,1,e1=2")
    with pytest.raises(ConfigError, match="--node-memory: cannot read 'lots' as int"):
        resources.parse_flag("memory_mb", "lots")


def test_profiles_then_single_settings_then_a_hosts_own():
    spec = resources.spec_from(
        {
            "profile": {"*": "rpi4"},
            "cpu": {"e1": 0.3},
            "memory_mb": {"ep": 512},
        }
    )
    got = resources.resolve_spec(spec, Topology(edge_nodes=2))
    assert got["e0"] == resources.PROFILES["rpi4"]
    assert got["e1"].cpu == 0.3 and got["e1"].memory_mb == 2048 and got["e1"].profile == "rpi4"
    assert got["ep"] == Resources(memory_mb=512)  # "*" is the edge nodes only


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"e5": {"cpu": 1}}, "unknown host 'e5'"),
        ({"*": {"profile": "pi"}}, "unknown node profile 'pi'"),
        ({"*": {"cpu": 0}}, "node cpu must be 0.01"),
        ({"*": {"cpu": 999}}, "node cpu must be 0.01"),
        ({"*": {"memory_mb": 10}}, "node memory must be 64..1048576 MB"),
        ({"*": {"cpuset": "0-"}}, "use CPU numbers and ranges"),
        ({"*": {"cpuset": "3-1"}}, "descending"),
        ({"*": {"cpuset": "4095"}}, "CPU 4095 is not online"),
        ({"*": {"read_mbps": 0}}, "read_mbps must be 0.1..100000"),
    ],
)
def test_bad_node_resources_are_one_line_errors(spec, message):
    with pytest.raises(ConfigError, match=message):
        resources.resolve_spec(spec, Topology(edge_nodes=3))


def test_the_heap_must_fit_the_nodes_memory():
    Resources(memory_mb=640).check_heap(256, "e0")
    with pytest.raises(ConfigError, match=r"e0: a 512 MB heap needs about 672 MB"):
        Resources(memory_mb=640).check_heap(512, "e0")


def test_node_resources_are_for_the_netns_backend():
    assert backend_options("netns", node_resources={"*": {"cpu": 0.5}}) == {
        "resources": {"*": {"cpu": 0.5}}
    }
    with pytest.raises(ConfigError, match="are for --backend netns"):
        backend_options("libvirt", node_resources={"*": {"cpu": 0.5}})


def test_cpusets_read_and_written():
    assert resources.parse_cpuset("0-2,5") == {0, 1, 2, 5}
    assert resources.format_cpuset({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"


def test_a_process_joins_every_hierarchy_then_runs_with_the_same_pid(tmp_path):
    dirs = {"cpu": tmp_path / "cpu", "memory": tmp_path / "memory"}
    for d in dirs.values():
        d.mkdir()
    argv = cgroups.join_argv(dirs, ["sh", "-c", "echo $$"])
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()
    for d in dirs.values():
        assert (d / "cgroup.procs").read_text().strip() == out  # the command's own PID


def test_a_cgroup_that_takes_no_pid_runs_nothing(tmp_path):
    """A limit that would silently not apply is an error (exit 125), not a run."""
    dirs = {"cpu": tmp_path / "missing"}
    marker = tmp_path / "ran"
    proc = subprocess.run(
        cgroups.join_argv(dirs, ["touch", str(marker)]), capture_output=True, text=True
    )
    assert proc.returncode == 125 and not marker.exists()


def test_the_v1_and_v2_layouts_name_one_directory_per_hierarchy():
    v2 = cgroups.Layout(2, v2_parent=Path("/sys/fs/cgroup/edgetb"))
    assert v2.dirs("tb-abc123-e0") == {"": Path("/sys/fs/cgroup/edgetb/tb-abc123-e0")}
    v1 = cgroups.Layout(
        1,
        v1_parents=(
            ("cpu", Path("/sys/fs/cgroup/cpu/edgetb")),
            ("memory", Path("/sys/fs/cgroup/memory/a/edgetb")),
        ),
    )
    assert v1.dirs("tb-abc123-e0") == {
        "cpu": Path("/sys/fs/cgroup/cpu/edgetb/tb-abc123-e0"),
        "memory": Path("/sys/fs/cgroup/memory/a/edgetb/tb-abc123-e0"),
    }
    # cpu and cpuacct mounted together (systemd's v1 layout): one directory, named once
    both = cgroups.Layout(
        1,
        v1_parents=(
            ("cpu", Path("/sys/fs/cgroup/cpu,cpuacct/edgetb")),
            ("cpuacct", Path("/sys/fs/cgroup/cpu,cpuacct/edgetb")),
        ),
    )
    assert both.dirs("tb-abc123-e0") == {
        "cpu": Path("/sys/fs/cgroup/cpu,cpuacct/edgetb/tb-abc123-e0")
    }
    m = cgroups.NAME_RE.match("tb-abc123-e0")
    assert m is not None and m.group(1) == "abc123"
    assert cgroups.NAME_RE.match("tb-abc12-e0") is None

"""Sweep configuration: validation errors, grid expansion, flags and presets (pure logic)."""

from pathlib import Path

import pytest

from common.errors import ConfigError
from experiments.plan import estimate
from experiments.settings.config import SweepConfig, load_toml, preset
from experiments.settings.fields import parse_list
from experiments.sweep import config_from_args, parser
from model.consistency import remote_round_trip_probability, required_acks


def from_flags(*argv):
    return config_from_args(parser().parse_args(list(argv)))


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--nodes", "3", "--rf", "4"], r"the grid is empty: no replication factor of 4 fits"),
        (["--nodes", "3,4", "--rf", "2,5"], r"rf 5 exceeds every node count \(3, 4\)"),
        (
            ["--rf", "3..1"],
            r"--rf: '3\.\.1' is a descending range; write it ascending, e\.g\. 1\.\.3",
        ),
        (["--latency", "0..inf"], r"--latency: '0\.\.inf' is not a finite number"),
        (["--latency", "nan"], r"--latency: 'nan' is not a finite number"),
        (["--latency", "0..100..0"], r"the step of '0\.\.100\.\.0' must be positive"),
        (["--latency", "0..100..-5"], r"the step of '0\.\.100\.\.-5' must be positive"),
        (["--latency", "0..1e9"], r"'0\.\.1e9' expands to 1000000001 values, more than 1000"),
        (["--latency=-1e308..1e308"], "expands to too many values, more than 1000"),
        (["--nodes", "1..1001"], "expands to 1001 values, more than 1000"),
        (["--loss", "1..2..3..4"], r"--loss: cannot read '1\.\.2\.\.3\.\.4'"),
        (["--rf", "1..x"], r"--rf: cannot read '1\.\.x' as integers"),
        (["--timeout", "nan"], "request_timeout_s must be between 1 and 600, got nan"),
        (["--timeout", "inf"], "request_timeout_s must be between 1 and 600, got inf"),
        (["--seed", "-1"], "seed must be an integer >= 0, got -1"),
        (["--heap-mb", "0"], "heap_mb must be an integer >= 128, got 0"),
        (["--repetitions", "1000000000"], "the grid has 396000000000 cells, more than 100000"),
        (["--backend", "hosts"], "the hosts backend needs inventory"),
        (["--node-memory", "300"], "e0: a 256 MB heap needs about 416 MB"),
        (["--backend", "libvirt", "--node-cpu", "1"], "are for --backend netns"),
        (["--node-profile", "rpi5"], "unknown node profile 'rpi5'"),
        (["--inventory", "x.ini"], "--inventory is for --backend hosts"),
        (["--vm-vcpus", "2"], "--vm-vcpus/--vm-memory are for --backend libvirt"),
        (["--backend", "libvirt", "--vm-vcpus", "0"], "vm_vcpus must be an integer >= 1"),
        (["--backend", "libvirt", "--vm-memory", "100"], "vm_memory_mb must be an integer >= 256"),
        (["--subnet-pool", "10.1.0.0/25"], "smaller than one run's /24"),
        (["--backend", "libvirt", "--shaper", "gateway"], "libvirt backend shapes inside"),
        (["--latency", "-5"], "latency_ms values must be between 0"),
        (["--loss", "100"], "loss_pct values must be between 0"),
        (["--cl", "FIVE"], "unknown consistency level"),
        (["--cl", "serial"], "only for lightweight transactions"),
        (["--profile", "mesh"], "unknown profile 'mesh'"),
        (["--policy", "random"], "unknown policy 'random'"),
        (["--shaper", "magic"], "unknown shaper"),
        (["--backend", "docker"], "docker"),
        (["--nodes", ""], "nodes is empty"),
        (["--latency", ","], "latency_ms is empty"),
        (["--nodes", "0"], "nodes values must be integers from 1"),
        (["--nodes", "10"], "nodes values must be integers from 1 to 9"),
        (["--writes", "0"], "writes must be an integer >= 1"),
        (["--repetitions", "0"], "repetitions must be an integer >= 1"),
        (["--latency", "abc"], "cannot read 'abc'"),
        (["--nodes", "3,3"], "lists a value twice"),
        (["--nodes", "3", "--rf", "1", "--cl", "THREE"], "needs 3 replica acks"),
        (["--profile", "file"], "needs links_file"),
        (["--verify-probes", "5"], "at least 20"),
        (["--config", "/nonexistent.toml"], "config file not found"),
    ],
)
def test_bad_input_is_a_clear_error(flags, message):
    with pytest.raises(ConfigError, match=message):
        from_flags(*flags)


def test_empty_grid_when_no_rf_fits():
    with pytest.raises(ConfigError) as err:
        SweepConfig(nodes=(3, 4), rf=(5, 6))
    assert str(err.value) == (
        "the grid is empty: no replication factor of 5, 6 fits any node count (3, 4)"
    )


def test_an_rf_no_node_count_holds_is_an_error_even_when_others_fit():
    with pytest.raises(ConfigError) as err:
        SweepConfig(nodes=(3,), rf=(2, 5))
    assert str(err.value).startswith("rf 5 exceeds every node count (3)")


def test_defaults_are_the_papers_grid():
    c = SweepConfig()
    assert c.nodes == (3, 4, 5) and c.cl == "LOCAL_QUORUM" and c.writes == 1000
    assert c.latency_ms == tuple(float(x) for x in range(0, 101, 10))
    assert c.loss_pct == (0.5, 2.5, 7.5) and c.policy == "round-robin"
    # RF 1..k per k: (3 + 4 + 5) x 11 latencies x 3 losses
    assert len(c.cells()) == 12 * 11 * 3 == 396


def test_shipped_paper_config_matches_defaults():
    paper = SweepConfig.from_dict(preset("paper"))
    assert paper.cells() == SweepConfig().cells()
    assert paper.fingerprint() == SweepConfig().fingerprint()


def test_rf_above_a_node_count_is_skipped_for_it():
    c = from_flags("--nodes", "3,5", "--rf", "1,4", "--latency", "0", "--loss", "0.5")
    assert c.rfs(3) == (1,) and c.rfs(5) == (1, 4)
    assert c.skipped() == [(3, 4)]
    assert [cell.cell_id for cell in c.cells()] == [
        "n3-rf1-l0-p0.5-r1",
        "n5-rf1-l0-p0.5-r1",
        "n5-rf4-l0-p0.5-r1",
    ]


def test_rf_k_means_every_node():
    c = from_flags("--nodes", "3,5", "--rf", "1,2,k", "--latency", "0", "--loss", "1")
    assert c.rfs(3) == (1, 2, 3) and c.rfs(5) == (1, 2, 5)


def test_cell_order_groups_clusters_then_networks_then_rf():
    c = from_flags("--nodes", "3", "--latency", "0,20", "--loss", "0.5,7.5", "--repetitions", "2")
    cells = c.cells()
    assert len(cells) == 2 * 2 * 2 * 3
    networks = [cell.network for cell in cells]
    # each network setting is one contiguous block of RF cells
    blocks = [networks[i] for i in range(len(networks)) if i == 0 or networks[i] != networks[i - 1]]
    assert len(blocks) == len(set(blocks)) == 8
    assert [cell.rf for cell in cells[:3]] == [1, 2, 3]


def test_flags_override_config_file(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[sweep]\nnodes = [4]\nwrites = 10\ncl = "ONE"\n')
    c = from_flags("--config", str(f), "--writes", "20")
    assert c.nodes == (4,) and c.writes == 20 and c.cl == "ONE"


def test_unknown_config_keys_and_tables(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text("[sweep]\nnodez = [4]\n")
    with pytest.raises(ConfigError, match="unknown sweep settings"):
        from_flags("--config", str(f))
    f.write_text("[grid]\nnodes = [4]\n")
    with pytest.raises(ConfigError, match="unknown tables"):
        load_toml(f)


def test_quick_preset():
    c = from_flags("--quick")
    assert c.nodes == (3, 5) and c.latency_ms == (0.0, 50.0, 100.0)
    assert c.loss_pct == (0.5, 7.5) and c.rfs(5) == (1, 2, 3, 4, 5)
    assert estimate.sweep_s(c) < 15 * 60
    assert c.first_pass == (0.0, 50.0)  # figures from the fast third of the grid


def test_latencies_on_the_command_line_keep_what_fits_of_a_presets_first_pass():
    assert from_flags("--quick", "--latency", "0,100").first_pass == (0.0,)
    assert from_flags("--quick", "--latency", "20").first_pass is None  # none of it fits
    assert from_flags("--quick", "--latency", "0,100", "--first-pass", "100").first_pass == (100.0,)
    with pytest.raises(ConfigError, match="first_pass latency 50 ms is not in the grid"):
        from_flags("--quick", "--latency", "0,100", "--first-pass", "50")  # asked: refused


def test_fingerprint_ignores_output_dir_but_not_the_grid():
    a = from_flags("--nodes", "3", "--out", "/tmp/a")
    assert a.fingerprint() == from_flags("--nodes", "3", "--out", "/tmp/b").fingerprint()
    assert a.fingerprint() != from_flags("--nodes", "3", "--writes", "5").fingerprint()
    # how long a slow node may take to start is not what is measured: a rerun with more
    # time resumes the same run
    slow = from_flags("--nodes", "3", "--cql-timeout", "900")
    assert slow.cql_timeout_s == 900.0 and a.cql_timeout_s is None
    assert slow.fingerprint() == a.fingerprint()


def test_parse_list_ranges():
    assert parse_list("x", "0..100..25", float) == (0, 25, 50, 75, 100)
    assert parse_list("x", "1..3", int) == (1, 2, 3)
    assert parse_list("x", "5..5", int) == (5,)
    assert parse_list("x", "0..10..4", int) == (0, 4, 8)  # the end need not be on a step
    # values are multiplied out, not accumulated: exactly what the user would type
    assert parse_list("x", "0..1..0.1", float)[3] == 0.3
    assert len(parse_list("x", "0..1..0.1", float)) == 11


def test_rf_ranges_measure_every_rf_of_the_range():
    c = from_flags("--nodes", "3,5", "--rf", "1..3,k", "--latency", "0", "--loss", "1")
    assert c.rfs(3) == (1, 2, 3) and c.rfs(5) == (1, 2, 3, 5)


def test_config_file_of_the_wrong_shape(tmp_path):
    f = tmp_path / "s.toml"
    for text, message in [
        ("sweep = 3\n", "sweep must be a table"),
        ('[sweep]\nnodes = "x"\n', "nodes values must be integers from 1 to 9, got 'x'"),
        ("[sweep]\nlinks_file = 3\n", "links_file must be a string"),
        ('[sweep]\nbackend = ["netns"]\n', r"backend must be a string, got \['netns'\]"),
        ("[sweep]\nlatency_ms = [nan]\n", "latency_ms values must be numbers, got nan"),
        ("[sweep]\nlatency_ms = [inf]\n", "latency_ms values must be between 0 and 10000"),
        ("[sweep\n", "invalid TOML"),
    ]:
        f.write_text(text)
        with pytest.raises(ConfigError, match=message):
            from_flags("--config", str(f))
    f.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        from_flags("--config", str(f))
    with pytest.raises(ConfigError, match="is not a regular file"):
        from_flags("--config", str(tmp_path))


def test_link_file_is_read_whole_before_anything_starts(tmp_path):
    f = tmp_path / "links.toml"
    f.write_text('[[link]]\nsrc = "e0"\ndst = "e4"\ndelay_ms = 5\n')
    flags = ("--profile", "file", "--links", str(f), "--latency", "0", "--loss", "0")
    assert from_flags(*flags, "--nodes", "5").links_file == str(f)
    # e4 does not exist with 3 nodes: an error now, not after the cluster is up
    with pytest.raises(ConfigError, match="unknown host 'e4'"):
        from_flags(*flags, "--nodes", "3,5")


@pytest.mark.parametrize(
    "level, rf, acks",
    [
        ("ONE", 3, 1),
        ("LOCAL_QUORUM", 1, 1),
        ("LOCAL_QUORUM", 2, 2),
        ("LOCAL_QUORUM", 3, 2),
        ("QUORUM", 5, 3),
        ("ALL", 4, 4),
        ("TWO", 3, 2),
        ("ANY", 2, 1),
        ("local_one", 3, 1),
    ],
)
def test_required_acks(level, rf, acks):
    assert required_acks(level, rf) == acks


def test_remote_round_trip_probability():
    # RF 1 under LOCAL_QUORUM: local only when the coordinator holds the key (1/n)
    assert remote_round_trip_probability("LOCAL_QUORUM", 1, 4) == pytest.approx(0.75)
    assert remote_round_trip_probability("LOCAL_QUORUM", 2, 4) == 1.0
    assert remote_round_trip_probability("ONE", 3, 3) == 0.0


def test_estimate_grows_with_latency_and_loss():
    c = from_flags("--nodes", "3", "--latency", "0,50", "--loss", "0,0.5,7.5", "--rf", "2")
    by = {(cell.latency_ms, cell.loss_pct): estimate.write_ms(c, cell) for cell in c.cells()}
    # paper profile: 10 ms to the endpoint + one 2L round trip to a replica
    assert by[(0, 0)] == pytest.approx(estimate.COSTS.base_write_ms + 10)
    assert by[(50, 0)] - by[(0, 0)] == pytest.approx(100)
    assert by[(50, 0.5)] > by[(50, 0)]
    assert by[(50, 7.5)] > by[(50, 0.5)]


def test_the_preview_is_the_first_pass_in_miniature():
    from experiments.settings.config import load_toml

    paper = SweepConfig.from_dict(load_toml("experiments/configs/paper.toml"))
    assert paper.first_pass == (0.0, 50.0, 100.0)
    preview = paper.preview()
    assert preview.latency_ms == (0.0, 50.0, 100.0) and preview.loss_pct == paper.loss_pct
    assert preview.nodes == paper.nodes and len(preview.cells()) == 108
    assert (preview.writes, preview.warmup, preview.verify_probes) == (30, 10, 20)
    assert preview.out == "results/preview" and preview.name == "paper-preview"
    assert preview.fingerprint() != paper.fingerprint()
    # without a first pass: 0, 50 and 100 ms where the grid has them
    assert SweepConfig(latency_ms=(0.0, 20.0, 100.0)).preview().latency_ms == (0.0, 100.0)


def test_a_partitioned_link_file_is_estimated_with_the_write_timeout(tmp_path):
    """A links file that cuts e0 off from e1 (100 % loss both ways) is a partition, not an
    error: the writes that need that ack take the coordinator's write timeout."""
    f = tmp_path / "links.toml"
    f.write_text(
        '[[link]]\nsrc = "e0"\ndst = "e1"\nloss_pct = 100\n'
        '[[link]]\nsrc = "e1"\ndst = "e0"\nloss_pct = 100\n'
    )
    c = from_flags(
        "--profile", "file", "--links", str(f), "--nodes", "3", "--rf", "2",
        "--latency", "0", "--loss", "0", "--cl", "ALL",
    )  # fmt: skip
    (cell,) = c.cells()
    ms = estimate.write_ms(c, cell)
    # ALL at RF 2 of 3 times out when the coordinator needs an ack across the cut:
    # {e0, e1} coordinated by e0 or e1, {e0, e2} by e1, {e1, e2} by e0: 4 in 9 writes
    assert ms - estimate.COSTS.base_write_ms == pytest.approx(4 / 9 * 2000)


def test_quick_with_a_config_that_has_no_quick_table_is_an_error(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text("[sweep]\nnodes = [3]\n")
    with pytest.raises(ConfigError, match=r"has no \[quick\] table"):
        from_flags("--config", str(path), "--quick")


def test_ycsb_targets_are_whole_operations_per_second():
    with pytest.raises(ConfigError, match="target values must be integers"):
        SweepConfig(workload=("ycsb-a",), target=(0.5,), nodes=(3,), rf=(3,))
    with pytest.raises(ConfigError, match="--target: cannot read '0.5' as integers"):
        from_flags("--workload", "ycsb-a", "--target", "0.5")


def test_a_properties_files_cells_carry_a_digest_of_its_content(tmp_path):
    """Two files with one stem (or a file named like a shipped workload) never share cell
    ids, and editing a file changes the run's fingerprint (no resume into other numbers)."""
    a, b = tmp_path / "x" / "a.properties", tmp_path / "y" / "a.properties"
    for path, prop in (
        (a, "readproportion=1\n"),
        (b, "readproportion=0.5\nupdateproportion=0.5\n"),
    ):
        path.parent.mkdir()
        path.write_text(f"recordcount=10\noperationcount=10\n{prop}")
    ids = {
        w: {
            c.cell_id
            for c in SweepConfig(workload=(w,), nodes=(3,), rf=(3,), latency_ms=(0,)).cells()
        }
        for w in (str(a), str(b), "ycsb-a")
    }
    assert not ids[str(a)] & ids[str(b)] and not ids[str(a)] & ids["ycsb-a"]
    before = SweepConfig(workload=(str(a),), nodes=(3,), rf=(3,)).fingerprint()
    a.write_text("recordcount=10\noperationcount=10\nreadproportion=0.9\nupdateproportion=0.1\n")
    assert SweepConfig(workload=(str(a),), nodes=(3,), rf=(3,)).fingerprint() != before


def test_the_settings_reference_is_current():
    # docs/sweep-settings.md is made from SweepConfig's table: a setting added, renamed or
    # given another default without it fails here
    from pathlib import Path

    from experiments.settings.reference import settings_reference

    doc = Path(__file__).resolve().parents[2] / "docs" / "sweep-settings.md"
    assert doc.read_text() == settings_reference(), (
        "regenerate it: python -c 'from experiments.settings.reference import settings_reference; "
        'print(settings_reference(), end="")\' > docs/sweep-settings.md'
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--latency", "0.1,0.1000001"], "latency_ms lists a value twice to 0.001: 0.1, 0.1000001"),
        (["--loss", "2.5,2.5004"], "loss_pct lists a value twice to 0.001: 2.5, 2.5004"),
        (["--workload", "ycsb-a,ycsb-A"], "workload lists a value twice"),
        (["--workload", "writes,WRITES"], "workload lists a value twice"),
        (["--fault", "none,kill:e1@30%,kill:e1@30.0%"], "are the same value"),
    ],
)
def test_two_spellings_of_one_grid_value_are_refused(flags, message):
    # each would have made two cells with one id: the second lost at commit, both "done"
    # on resume
    with pytest.raises(ConfigError, match=message):
        from_flags("--nodes", "3", *flags)


def test_cell_ids_are_one_to_one_with_grid_values():
    config = from_flags("--nodes", "3", "--rf", "1", "--latency", "1234.567,10000,0.1234")
    ids = [c.cell_id for c in config.cells()]
    assert len(set(ids)) == len(ids) == 3 * 3
    assert {c.latency_ms for c in config.cells()} == {1234.567, 10000.0, 0.123}
    assert "n3-rf1-l1234.57-p0.5-r1" in ids  # %g, as every stored run's ids
    assert "n3-rf1-l0.123-p0.5-r1" in ids  # rounded to the shaper's resolution (1 µs)
    # two values %g writes alike would share an id: refused
    with pytest.raises(ConfigError, match="latency_ms: 9999.999 and 10000.0 are the same value"):
        from_flags("--nodes", "3", "--latency", "9999.999,10000")
    with pytest.raises(ConfigError, match="target: 1234567 and 1234568 are the same value"):
        from_flags("--nodes", "3", "--workload", "ycsb-a", "--target", "1234567,1234568")


def test_a_workload_file_under_two_spellings_is_one_workload(tmp_path, monkeypatch):
    props = tmp_path / "mine.properties"
    props.write_text("recordcount=10\noperationcount=10\nreadproportion=1\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="are the same value"):
        SweepConfig(nodes=(3,), workload=("mine.properties", str(props)))


@pytest.mark.parametrize("given", ["paper", "paper.toml", "experiments/configs/paper.toml"])
def test_a_shipped_preset_is_found_by_name_from_any_directory(given, tmp_path, monkeypatch):
    from experiments.settings.config import CONFIG_DIR
    from experiments.sweep import config_file

    monkeypatch.chdir(tmp_path)  # not the project's directory
    assert config_file(given) == CONFIG_DIR / "paper.toml"


def test_a_file_of_ones_own_comes_before_a_preset_of_the_same_name(tmp_path, monkeypatch):
    from experiments.sweep import config_file

    monkeypatch.chdir(tmp_path)
    (tmp_path / "paper.toml").write_text("[sweep]\n")
    assert config_file("paper.toml") == Path("paper.toml")
    with pytest.raises(ConfigError, match=r"config file not found: x/paper.toml \(shipped"):
        config_file("x/paper.toml")  # a path elsewhere is not a preset's


def test_the_vm_size_shown_is_the_backends_default():
    """`sweep --help` and `up --help` show the same VM size: libvirt's EDGE_SIZE (the
    sweep once said "default none" for --vm-memory)."""
    from experiments.settings.config import shown_default
    from testbed.backends.libvirt_xml import EDGE_SIZE

    assert shown_default("vm_vcpus") == str(EDGE_SIZE.vcpus)
    assert shown_default("vm_memory_mb") == str(EDGE_SIZE.memory_mb)

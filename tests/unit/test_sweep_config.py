"""Sweep configuration: validation errors, grid expansion, flags and presets (pure logic)."""

import pytest

from experiments import estimate
from experiments.config import SweepConfig, load_toml, parse_list, preset
from experiments.consistency import remote_round_trip_probability, required_acks
from experiments.sweep import config_from_args, parser
from testbed.errors import ConfigError


def from_flags(*argv):
    return config_from_args(parser().parse_args(list(argv)))


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--nodes", "3", "--rf", "4"], "rf 4 exceeds every node count"),
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
    with pytest.raises(ConfigError, match="exceeds every node count"):
        SweepConfig(nodes=(3,), rf=(5,))


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


def test_fingerprint_ignores_output_dir_but_not_the_grid():
    a = from_flags("--nodes", "3", "--out", "/tmp/a")
    assert a.fingerprint() == from_flags("--nodes", "3", "--out", "/tmp/b").fingerprint()
    assert a.fingerprint() != from_flags("--nodes", "3", "--writes", "5").fingerprint()


def test_parse_list_ranges():
    assert parse_list("x", "0..100..25", float) == (0, 25, 50, 75, 100)
    assert parse_list("x", "1..3", int) == (1, 2, 3)


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
    assert by[(0, 0)] == pytest.approx(estimate.BASE_WRITE_MS + 10)
    assert by[(50, 0)] - by[(0, 0)] == pytest.approx(100)
    assert by[(50, 0.5)] > by[(50, 0)]
    assert by[(50, 7.5)] > by[(50, 0.5)]

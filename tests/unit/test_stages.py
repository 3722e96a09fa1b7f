"""A sweep of several testbed sizes in stages (experiments.plan.stages): each size at the P
the fidelity benchmark accepted for it, every cell in exactly one stage, a first pass
still first, and the staged plan only where the model says it ends first."""

import re
from collections import Counter

import pytest

from common.errors import ConfigError
from experiments.plan import estimate, stages
from experiments.run.launch import choose_parallel, choose_stages, parse_parallel
from experiments.run.summary import dry_run, dry_run_plan
from experiments.settings.config import SweepConfig

KW = {"cores": 2, "total_mb": 24000, "used_mb": 1000}


@pytest.fixture(autouse=True)
def host_costs():
    """The development machine's costs for the host shaper (P=2 on 3 nodes, 1 on 5)."""
    before = estimate.COSTS
    estimate.use(estimate.defaults("host"))
    yield
    estimate.use(before)


def none(nodes: int):
    return None  # no verdict of this machine: the development machine's


def test_sizes_with_different_verdicts_run_in_stages_each_at_its_own_p():
    config = SweepConfig(
        nodes=(3, 4, 5), latency_ms=(0.0, 20.0, 50.0, 100.0), loss_pct=(0.5, 7.5),
        first_pass=(0.0, 100.0),
    )  # fmt: skip
    cells = config.cells()
    staged = stages.auto(config, cells, **KW, accepted=none)
    # every cell once
    assert Counter(c.cell_id for s in staged for c in s.cells) == Counter(c.cell_id for c in cells)
    # the first pass's groups first (3 nodes, then 4 and 5), then the rest's
    assert [(s.nodes, {config.phase(c) for c in s.cells}) for s in staged] == [
        ((3,), {0}), ((4, 5), {0}), ((3,), {1}), ((4, 5), {1}),
    ]  # fmt: skip
    assert [s.parallel for s in staged if s.nodes == (4, 5)] == [1, 1]
    assert max(s.parallel for s in staged if s.nodes == (3,)) == 2
    assert all("5-node grids" in s.why for s in staged if s.nodes == (4, 5))
    single = estimate.wall_s(config, cells, 1, 2)  # the largest testbed's verdict: P=1
    assert sum(estimate.wall_s(config, list(s.cells), s.parallel, 2) for s in staged) < single - 60


def test_one_stage_where_every_size_has_the_same_verdict():
    config = SweepConfig(nodes=(3, 5), latency_ms=(20.0, 100.0), loss_pct=(0.5,))
    cells = config.cells()
    same = stages.auto(config, cells, **KW, accepted=lambda n: (1, "here"))
    assert len(same) == 1 and same[0].parallel == 1 and len(same[0].cells) == len(cells)
    only3 = SweepConfig(nodes=(3,), latency_ms=(20.0, 100.0), loss_pct=(0.5,))
    (stage,) = stages.auto(only3, only3.cells(), **KW, accepted=none)
    assert stage.label == "3 nodes" and "on 3-node grids" in stage.why


def test_this_machines_verdict_per_size_decides():
    config = SweepConfig(nodes=(3, 5), latency_ms=(50.0, 100.0), loss_pct=(0.5, 2.5, 7.5))
    verdicts = {3: (3, "here: 3"), 5: (1, "here: 5")}
    staged = stages.auto(config, config.cells(), **KW, accepted=verdicts.get)
    assert [s.nodes for s in staged] == [(3,), (5,)]  # most testbeds at once first
    assert "fidelity accepts up to 3 (here: 3)" in staged[0].why and staged[0].parallel > 1
    assert "fidelity accepts up to 1 (here: 5)" in staged[1].why and staged[1].parallel == 1


def test_a_staged_plan_only_where_it_ends_first():
    # one 3-node cell beside the 5-node ones: a stage of its own saves less than a minute
    config = SweepConfig(nodes=(3, 5), latency_ms=(100.0,), loss_pct=(0.5,), rf=(1,))
    (stage,) = stages.auto(config, config.cells(), **KW, accepted=none)
    assert stage.parallel == 1 and stage.nodes == (3, 5)


def test_the_dry_run_shows_the_stages_and_their_sum():
    config = SweepConfig(nodes=(3, 5), latency_ms=(20.0, 50.0, 100.0), loss_pct=(0.5, 7.5))
    staged = stages.auto(config, config.cells(), **KW, accepted=none)
    assert len(staged) == 2
    plan = dry_run_plan(config, 1, "", 2, staged=staged)
    assert plan["parallel"] == 2
    assert plan["estimated_s"] == round(
        sum(estimate.wall_s(config, list(s.cells), s.parallel, 2) for s in staged)
    )
    assert [s["nodes"] for s in plan["stages"]] == [[3], [5]]
    assert sum(s["cells"] for s in plan["stages"]) == plan["cells"]
    text = dry_run(config, plan)
    assert "in 2 stages, up to 2 testbeds at once" in text
    assert "  5 nodes, " in text and "at P=1" in text
    alone = dry_run_plan(config, 1, "as asked", 2)
    assert alone["stages"] is None and alone["estimated_s"] > plan["estimated_s"]


def test_a_resumed_dry_run_estimates_the_p_its_run_will_use():
    # the 5-node cells stored: what is left runs at the 3-node verdict, not the 5-node one
    config = SweepConfig(nodes=(3, 5), latency_ms=(20.0, 50.0, 100.0), loss_pct=(0.5, 7.5))
    stored = frozenset(c.cell_id for c in config.cells() if c.nodes == 5)
    todo = [c for c in config.cells() if c.cell_id not in stored]
    staged = stages.auto(config, todo, **KW, accepted=none)
    assert len(staged) == 1 and staged[0].parallel == 2
    plan = dry_run_plan(config, 1, "the largest testbed's", 2, stored=stored, staged=staged)
    assert plan["parallel"] == 2 and plan["why"] == staged[0].why
    assert plan["estimated_s"] == round(
        sum(estimate.wall_s(config, list(s.cells), s.parallel, 2) for s in staged)
    )


def test_p_per_testbed_size_as_asked_stages_without_the_model():
    """--parallel 3:2,4:2,5:1: sizes with the same P share a stage, most at once first,
    within each phase; taken whatever the model says; bad values refused in one line."""
    config = SweepConfig(
        nodes=(3, 4, 5), latency_ms=(0.0, 20.0), loss_pct=(0.5,), first_pass=(0.0,)
    )
    per_size = parse_parallel("3:2, 4:2,5:1", config)
    assert per_size == {3: 2, 4: 2, 5: 1}
    cells = config.cells()
    staged = choose_stages(config, cells, per_size)
    assert [(s.nodes, s.parallel, {config.phase(c) for c in s.cells}) for s in staged] == [
        ((3, 4), 2, {0}), ((5,), 1, {0}), ((3, 4), 2, {1}), ((5,), 1, {1}),
    ]  # fmt: skip
    assert Counter(c.cell_id for s in staged for c in s.cells) == Counter(c.cell_id for c in cells)
    assert all(s.why == "as asked for its testbed size" for s in staged)
    assert choose_parallel(config, cells, per_size) == (2, "as asked for each testbed size")
    assert choose_parallel(config, [c for c in cells if c.nodes == 5], per_size)[0] == 1
    for bad, says in [
        ("3:2,5:1", "a P for each testbed size of the sweep, and only those: 3, 4, 5 nodes"),
        ("3:2,4:2,5:1,6:1", "and only those"),
        ("3:2,3:1,4:1,5:1", "gives 3 nodes two Ps"),
        ("3:2,4:0,5:1", "an integer from 1 to"),
        ("x:2,4:1,5:1", "'x:2' is not NODES:P"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(says)):
            parse_parallel(bad, config)

"""Whatever a user types or hands in is read one way (common.inputs): a value is either
accepted within its bounds or refused with one ConfigError line (argparse: one usage
line) that shows a readable part of it. Hypothesis generates the inputs; the classes
shown red before: numbers of hundreds of digits (OverflowError in a flag, a topology),
TOML and JSON nested thousands deep (RecursionError), CSV rows with more fields than
the header (TypeError)."""

import argparse
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common import inputs
from common.errors import ConfigError
from emulation import trace
from experiments.settings.config import KNOBS, SweepConfig
from experiments.settings.fields import check_knob, parse_list, parse_rf
from testbed import argtypes
from testbed.topology import parse_sites

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# text a user could type: digits, signs, dots, exponents, separators, and anything else
TYPED = st.one_of(
    st.text(alphabet="0123456789.,-+eExXinfaN ", max_size=60),
    st.text(max_size=40),
    st.integers(min_value=10**20, max_value=10**500).map(str),
)


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and len(text) <= 1000, text
    return text


@FUZZ
@given(TYPED)
def test_a_typed_number_is_in_bounds_or_one_usage_line(text):
    for parse, low, high in (
        (argtypes.integer(1, 9), 1, 9),
        (argtypes.integer(0), 0, math.inf),
        (argtypes.number(0.0, 100.0), 0.0, 100.0),
    ):
        try:
            value = parse(text)
        except argparse.ArgumentTypeError as exc:
            one_line(exc)
            continue
        assert low <= value <= high and math.isfinite(value)


@FUZZ
@given(TYPED, st.sampled_from(["--latency", "--loss", "--nodes", "--writes"]))
def test_a_list_flag_is_numbers_or_one_line(text, name):
    for kind in (int, float):
        try:
            values = parse_list(name, text, kind)
        except ConfigError as exc:
            one_line(exc)
            continue
        assert all(isinstance(v, kind) and math.isfinite(v) for v in values)
    try:
        parse_rf("--rf", text)
    except ConfigError as exc:
        one_line(exc)


@FUZZ
@given(TYPED)
def test_sites_are_a_small_topology_or_one_line(text):
    try:
        sizes = parse_sites(text)
    except ConfigError as exc:
        one_line(exc)
        return
    assert 1 <= sum(sizes) <= 9


JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats()
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=10,
)


@FUZZ
@given(st.sampled_from(sorted(KNOBS)), JSONISH)
def test_a_setting_from_a_file_is_checked_or_one_line(name, value):
    """What a TOML config or a stored run's config hands the sweep: any type, any size."""
    try:
        SweepConfig.from_dict({name: value})
    except ConfigError as exc:
        one_line(exc)
    try:
        check_knob(name, KNOBS[name], value, None)
    except ConfigError as exc:
        one_line(exc)


@pytest.mark.parametrize("opener, closer", [("[", "]"), ("{", "}")])
def test_documents_nested_thousands_deep_are_one_line(opener, closer):
    deep = opener * 5000 + closer * 5000
    with pytest.raises(ConfigError, match="nested more than 64 levels deep"):
        inputs.json_text(deep, "store manifest")
    with pytest.raises(ConfigError, match="nested more than 64 levels deep"):
        inputs.toml(f"x = {'[' * 5000}{']' * 5000}", "config file")
    assert inputs.depth(inputs.toml("a = [[1], [2, [3]]]\n[t]\nb = 1", "x")) == 4


@FUZZ
@given(st.text(max_size=200))
def test_any_text_is_toml_or_one_line(text):
    try:
        inputs.toml(text, "config file")
    except ConfigError as exc:
        one_line(exc)


def test_a_trace_row_with_more_fields_than_its_header_is_named(tmp_path):
    path = tmp_path / "extra.csv"
    path.write_text("t_s,src,dst,delay_ms\n0,e0,e1,5\n1,e0,e1,5,7\n")
    with pytest.raises(ConfigError, match="row 3 has more fields than the header"):
        trace.load(str(path))


def test_a_value_shown_in_an_error_is_cut_to_a_readable_length():
    assert inputs.shown("9" * 400).endswith("(402 characters)")
    assert len(inputs.shown("9" * 400)) < 70
    assert inputs.shown(5) == "5"


@FUZZ
@given(st.sampled_from(["clusters", "baseline", "parallel", "wall_s", "teardowns"]), JSONISH)
def test_a_stores_manifest_of_the_wrong_types_is_named_when_read(tmp_path_factory, key, value):
    """A store handed over with valid JSON of the wrong types in a run's manifest made
    the dry run's calibration fail with AttributeError; the store names it on reading."""
    import json
    import sqlite3

    from experiments.store.db import StateFileError, Store

    where = tmp_path_factory.mktemp("store")
    with Store(where) as s:
        s.begin_run("run1", "fp", "test", {"writes": 2}, {})
    db = sqlite3.connect(where / "results.sqlite")
    db.execute("UPDATE runs SET manifest=?", (json.dumps({key: value}),))
    db.commit()
    db.close()
    with Store(where, read_only=True) as s:
        try:
            (run,) = s.runs()
        except StateFileError as exc:
            assert f"the manifest of run run1: {key}" in one_line(exc) or "entry of" in str(exc)
            return
    manifest = run.manifest
    from experiments.plan import estimate

    estimate.calibrate([], [{**manifest, "run_id": "run1"}], 2, "host")  # never raises

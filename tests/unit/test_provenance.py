"""Provenance (issue 43, item 7): a run's manifest records which code measured it (the
git commit, checked against git itself), the packages, and the machine (its CPU model,
checked against lscpu); the report gives each run a line a reader can quote."""

import shutil
import subprocess

import pytest

from analysis import provenance
from experiments.plan.calibration import cpu_model
from experiments.run.manifest import ROOT, project_commit, static_manifest
from experiments.settings.config import SweepConfig


def test_a_manifest_names_the_commit_and_the_machine_as_their_own_tools_do():
    manifest = static_manifest(SweepConfig(), ["--quick"])
    if shutil.which("git") and (ROOT / ".git").exists():
        git = ["git", "-C", str(ROOT), "rev-parse", "HEAD"]
        head = subprocess.run(git, capture_output=True, text=True, check=True).stdout.strip()
        assert manifest["commit"] in (head, head + "-dirty")
    if shutil.which("lscpu"):
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = next(x.split(":", 1)[1].strip() for x in lscpu.splitlines()
                     if x.startswith("Model name"))  # fmt: skip
        assert cpu_model() == model
    assert manifest["packages"]["cassandra-driver"] and manifest["python"]


def test_no_checkout_no_commit(tmp_path):
    assert project_commit(tmp_path) is None


@pytest.mark.parametrize(
    "manifest, expected",
    [
        (
            {
                "commit": "0123456789abcdef0123-dirty",
                "python": "3.11.7",
                "kernel": "6.1.0",
                "machine": "x86_64",
                "cpu_model": "AMD EPYC",
                "cpus": 2,
                "packages": {"edge-testbed": "0.1.0", "cassandra-driver": "3.30.1"},
                "clusters": {"3": {"cassandra": "5.0.6", "java": "17.0.13", "backend": "netns"}},
            },
            "edge-testbed 0.1.0 (commit 0123456789ab with uncommitted changes), Cassandra "
            "5.0.6 on Java 17.0.13, netns backend, cassandra-driver 3.30.1, Python 3.11.7, "
            "Linux 6.1.0 x86_64, AMD EPYC (2 cores)",
        ),
        ({"python": "3.11.7", "packages": {}}, "Python 3.11.7"),  # an older run's manifest
        ({}, ""),
    ],
)
def test_the_line_a_reader_quotes(manifest, expected):
    assert provenance.line(manifest) == expected

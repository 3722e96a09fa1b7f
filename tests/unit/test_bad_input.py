"""Bad input to every command line: a one-line error naming the value, exit code 2, no
traceback, and nothing created or changed (issue 10, item 4).

Each case runs the real CLI (``python -m MODULE ARGS``) in the repository with HOME and
EDGETB_HOME in a directory of its own. Afterwards that directory must be exactly as before
(HOME still empty: no ~/.cache/edgetb, no ~/.edgetb; no run directory; no --out), and the
shared input files must be unchanged (a foreign SQLite file is not "repaired").

The CLIs run as if not root (``os.geteuid`` answers 65534 through a sitecustomize on
PYTHONPATH): bad input must be named before any root check, and a case that slipped
through validation stops at the root check instead of building namespaces on the machine
this test runs on. The cases run in parallel once per module; each is reported by itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN = "abc123"  # the run id of the hand-edited state files


@dataclass(frozen=True)
class Case:
    id: str
    module: str
    args: tuple[str, ...]
    names: str  # what the last line of stderr must contain (the offending value)
    state: str | None = None  # a hand edit of the run state put in EDGETB_HOME first


def case(id: str, module: str, args: str | list[str], names: str, state: str | None = None):
    return Case(id, module, tuple(args.split() if isinstance(args, str) else args), names, state)


HOSTS = "up --backend hosts --nodes 1 --inventory"
LINKS = "set --profile file --file"
SWEEP_FILE = "--profile file --latency 0 --loss 0 --links"
BIG = "9" * 400  # a number of hundreds of digits

CASES = [
    # -- python -m testbed -------------------------------------------------------------------
    case("up-nodes-zero", "testbed", "up --nodes 0", "'0'"),
    case("up-pool-small", "testbed", "up --subnet-pool 10.9.0.0/28", "10.9.0.0/28"),
    case("up-pool-garbage", "testbed", "up --subnet-pool nonsense", "'nonsense'"),
    case("up-nodes-nan", "testbed", "up --nodes nan", "'nan'"),
    case("up-nodes-too-many", "testbed", "up --nodes 10", "'10'"),
    case("up-sites-empty-site", "testbed", "up --sites 2,0", "every site needs at least one node"),
    case("up-sites-zero-sites", "testbed", "up --sites 0x3", "at least one site"),
    case("up-sites-too-many", "testbed", "up --sites 4x3", "at most 9"),
    case("up-sites-vs-nodes", "testbed", "up --sites 3x3 --nodes 3", "hold 9 nodes, not 3"),
    case("up-sites-endpoint", "testbed", "up --sites 2x2 --endpoint-site dc3", "'dc3'"),
    case("up-heap-negative", "testbed", "up --heap-mb -5", "'-5'"),
    case("up-cql-timeout-inf", "testbed", "up --cql-timeout inf", "'inf'"),
    case("up-cql-timeout-nan", "testbed", "up --cql-timeout nan", "'nan'"),
    case("up-vm-vcpus-zero", "testbed", "up --backend libvirt --vm-vcpus 0", "'0'"),
    case("up-vm-memory-small", "testbed", "up --backend libvirt --vm-memory 100", "'100'"),
    case("up-yaml-listen", "testbed", "up --yaml listen_address=10.0.0.1", "listen_address"),
    case("up-yaml-seeds", "testbed", "up --yaml seed_provider=x", "seed_provider"),
    case("up-yaml-port", "testbed", "up --yaml native_transport_port=1", "native_transport_port"),
    case("up-yaml-dirs", "testbed", "up --yaml hints_directory=/tmp", "hints_directory"),
    case("up-yaml-unparsable", "testbed", ["up", "--yaml", "concurrent_writes=[1,"], "[1,"),
    case("up-yaml-no-equals", "testbed", "up --yaml concurrent_writes", "'concurrent_writes'"),
    case("up-yaml-bad-key", "testbed", "up --yaml Bad-Key=1", "Bad-Key"),
    case("up-yaml-no-cassandra", "testbed", "up --no-cassandra --yaml x=1", "--no-cassandra"),
    case("up-subnet-public", "testbed", "up --subnet 8.8.8.0/24", "8.8.8.0/24"),
    case("up-backend-unknown", "testbed", "up --backend docker", "'docker'"),
    case("up-cluster-name", "testbed", ["up", "--cluster-name", "a;b"], "'a;b'"),
    case("up-inventory-not-hosts", "testbed", "up --inventory {files}/port.ini", "--inventory"),
    case("inventory-port", "testbed", f"{HOSTS} {{files}}/port.ini", "'abc'"),
    case("inventory-user-dash", "testbed", f"{HOSTS} {{files}}/user.ini", "'-oProxyCommand=x'"),
    case("inventory-host-dash", "testbed", f"{HOSTS} {{files}}/host.ini", "'-oProxyCommand=y'"),
    case("inventory-missing", "testbed", f"{HOSTS} {{files}}/none.ini", "none.ini"),
    case("inventory-directory", "testbed", f"{HOSTS} {{files}}", "files"),
    case("run-id-path", "testbed", "status --run ../x", "'../x'"),
    case("state-unknown-key", "testbed", f"status --run {RUN}", "['bogus']", "unknown-key"),
    case("state-missing-key", "testbed", f"down --run {RUN}", "['topology']", "missing-key"),
    case("state-wrong-type", "testbed", f"exec --run {RUN} e0 -- true", "'x'", "wrong-type"),
    case("state-topology", "testbed", f"status --run {RUN}", "'3'", "topology-type"),
    case("state-not-json", "testbed", f"inventory --run {RUN}", "state.json", "not-json"),
    case("dist-not-a-tarball", "testbed", "dist install --tarball {files}/junk.tgz", "junk.tgz"),
    case("dist-other-version", "testbed", "dist install --tarball {files}/c41.tgz", "4.1.3"),
    case("dist-directory", "testbed", "dist install --tarball {files}", "files"),
    case("dist-java-missing", "testbed", "dist install --java /no/java", "/no/java"),
    case("up-java-missing", "testbed", "up --java /no/java", "/no/java"),
    case("up-java-not-java", "testbed", "up --java {files}/afile", "afile"),
    # -- python -m testbed.client / testbed.cql (run on the endpoint) -------------------------
    case("client-timeout-nan", "testbed.client", "--timeout nan probe --expect 3", "'nan'"),
    case("client-expect-zero", "testbed.client", "probe --expect 0", "'0'"),
    case("client-rf-zero", "testbed.client", "write --rf 0", "'0'"),
    case("cql-consistency", "testbed.cql", ["--consistency", "MOST", "SELECT 1"], "'MOST'"),
    case("client-no-hosts", "testbed.client", "probe --expect 1", "--hosts"),
    # -- python -m emulation -----------------------------------------------------------------
    case("set-latency-nan", "emulation", "set --latency nan", "'nan'"),
    case("set-latency-negative", "emulation", "set --latency -1", "'-1'"),
    case("set-loss-over-100", "emulation", "set --loss 150", "'150'"),
    case("set-jitter-inf", "emulation", "set --jitter inf", "'inf'"),
    case("set-jitter-over-delay", "emulation", "set --latency 10 --jitter 20", "(20)"),
    case("set-file-missing-flag", "emulation", "set --profile file", "--file"),
    case("set-file-wrong-profile", "emulation", "set --file {files}/links.toml", "--file"),
    case("set-file-numbers", "emulation", f"{LINKS} {{files}}/links.toml --loss 1", "--loss"),
    case("links-scalar", "emulation", f"{LINKS} {{files}}/scalar_links.toml", "got 3"),
    case("links-unknown-host", "emulation", f"{LINKS} {{files}}/badhost.toml", "'e99'"),
    case("links-wrong-type", "emulation", f"{LINKS} {{files}}/badtype.toml", "'fast'"),
    case("links-unknown-key", "emulation", f"{LINKS} {{files}}/badkey.toml", "['delay']"),
    case("links-directory", "emulation", f"{LINKS} {{files}}", "files"),
    case("links-binary", "emulation", f"{LINKS} {{files}}/binary.toml", "binary.toml"),
    case("links-missing", "emulation", f"{LINKS} {{files}}/none.toml", "none.toml"),
    case("verify-probes", "emulation", "verify --probes 5", "'5'"),
    case("verify-sample-zero", "emulation", "verify --sample 0", "'0'"),
    case("verify-level", "emulation", "verify --level 0.5", "0.5"),
    case("show-run-id", "emulation", "show --run a/b", "'a/b'"),
    case("state-emulation", "emulation", f"clear --run {RUN}", "'x'", "wrong-type"),
    # -- python -m experiments.sweep (every case gets --out {out}) ---------------------------
    case("rf-descending", "experiments.sweep", "--rf 3..1", "'3..1'"),
    case("rf-range-bad", "experiments.sweep", "--rf 1..x", "'1..x'"),
    case("latency-to-inf", "experiments.sweep", "--latency 0..inf", "'0..inf'"),
    case("latency-overflow", "experiments.sweep", ["--latency=-1e308..1e308"], "1e308"),
    case("latency-step-zero", "experiments.sweep", "--latency 0..100..0", "'0..100..0'"),
    case("latency-nan", "experiments.sweep", "--latency nan", "'nan'"),
    case("loss-negative", "experiments.sweep", "--loss -1", "-1"),
    case("rf-over-nodes", "experiments.sweep", "--nodes 3 --rf 4", "4"),
    case("nodes-zero", "experiments.sweep", "--nodes 0", "0"),
    case("writes-zero", "experiments.sweep", "--writes 0", "got 0"),
    case("timeout-nan", "experiments.sweep", "--timeout nan", "nan"),
    case("heap-small", "experiments.sweep", "--heap-mb 64", "64"),
    case("verify-probes-few", "experiments.sweep", "--verify-probes 5", "got 5"),
    case("repetitions-huge", "experiments.sweep", "--repetitions 1000000000", "cells"),
    case("sweep-hosts", "experiments.sweep", "--backend hosts", "hosts"),
    case("sweep-sites-profile", "experiments.sweep", "--profile sites", "needs sites"),
    case("sweep-site-of-zero", "experiments.sweep", "--sites 3,0", "at least one node"),
    case("sweep-sites-rf", "experiments.sweep", "--sites 3,2 --rf 3", "above the size of site 2"),
    case("sweep-sites-nodes", "experiments.sweep", "--sites 3x3 --nodes 5", "hold 9 nodes"),
    case(
        "sweep-sites-profile-paper",
        "experiments.sweep",
        "--sites 2x2 --profile uniform",
        "'uniform'",
    ),
    case("sweep-level-twice", "experiments.sweep", "--cl quorum,QUORUM", "twice"),
    case("sweep-level-unknown", "experiments.sweep", "--cl LOCAL_QUORUM,MOST", "'MOST'"),
    case("parallel-zero", "experiments.sweep", "--parallel 0", "'0'"),
    case("parallel-word", "experiments.sweep", "--parallel two", "'two'"),
    case("parallel-huge", "experiments.sweep", "--parallel 1000", "'1000'"),
    case("first-pass-off-grid", "experiments.sweep", "--latency 0,50 --first-pass 20", "20"),
    case("first-pass-word", "experiments.sweep", "--first-pass fast", "'fast'"),
    case("workers-missing", "experiments.sweep", "--workers {files}/none.ini", "none.ini"),
    case("workers-bad-port", "experiments.sweep", "--workers {files}/port.ini", "'abc'"),
    case("workers-bad-dir", "experiments.sweep", "--workers {files}/wdir.ini", "absolute path"),
    case(
        "workers-parallel",
        "experiments.sweep",
        "--workers {files}/wdir.ini --parallel 2",
        "edgetb_parallel",
    ),
    case(
        "workers-hosts", "experiments.sweep", "--workers {files}/wdir.ini --backend hosts", "hosts"
    ),
    case("worker-timeout-alone", "experiments.sweep", "--worker-timeout 30", "--workers"),
    case(
        "worker-timeout-small",
        "experiments.sweep",
        "--workers {files}/wdir.ini --worker-timeout 1",
        "got 1",
    ),
    case("scheduler-bad", "experiments.sweep", "--scheduler lab1:8786", "tcp://HOST:PORT"),
    # numbers of hundreds of digits: OverflowError tracebacks before
    case(
        "writes-huge",
        "experiments.sweep",
        f"--writes {BIG}",
        "(400 characters)",
    ),
    case(
        "nodes-huge",
        "experiments.sweep",
        f"--nodes {BIG}",
        "not a number of a sane size",
    ),
    case(
        "rf-huge",
        "experiments.sweep",
        f"--rf {BIG}",
        "not a number of a sane size",
    ),
    case(
        "up-nodes-huge",
        "testbed",
        f"up --nodes {BIG}",
        "(402 characters)",
    ),
    case("config-deep", "experiments.sweep", "--config {files}/deep.toml", "nested more than"),
    case(
        "links-deep", "experiments.sweep", f"{SWEEP_FILE} {{files}}/deep_links.toml", "nested more"
    ),
    case("trace-extra", "experiments.sweep", "--trace {files}/extra.csv", "more fields than"),
    case(
        "workers-template",
        "experiments.sweep",
        "--workers {files}/template.ini",
        "holds template syntax",
    ),  # fmt: skip
    case(
        "workers-half", "experiments.sweep", "--workers {files}/half.yml", "did not read all of it"
    ),  # fmt: skip
    # plain tcp:// lets whoever reaches the scheduler run code as root on its workers
    case(
        "scheduler-plain",
        "experiments.sweep",
        "--scheduler tcp://127.0.0.1:8786",
        "--insecure-scheduler",
    ),  # fmt: skip
    case(
        "scheduler-tls-bare",
        "experiments.sweep",
        "--scheduler tls://127.0.0.1:8786",
        "needs Dask's TLS settings",
    ),  # fmt: skip
    # nothing listens on port 1: refused at once, before a run is opened in the results
    case(
        "scheduler-unreachable",
        "experiments.sweep",
        "--scheduler tcp://127.0.0.1:1 --insecure-scheduler",
        "no answer within",
    ),  # fmt: skip
    case(
        "scheduler-and-workers",
        "experiments.sweep",
        "--scheduler tcp://lab1:8786 --workers {files}/wdir.ini",
        "exclude each other",
    ),
    case("sweep-pool-small", "experiments.sweep", "--subnet-pool 10.1.0.0/25", "10.1.0.0/25"),
    case("sweep-vm-off-libvirt", "experiments.sweep", "--vm-vcpus 2", "--vm-vcpus"),
    case("config-scalar", "experiments.sweep", "--config {files}/scalar.toml", "got 3"),
    case("config-unknown-key", "experiments.sweep", "--config {files}/unknown.toml", "'bogus'"),
    case("config-wrong-type", "experiments.sweep", "--config {files}/wrongtype.toml", "'ten'"),
    case("config-directory", "experiments.sweep", "--config {files}", "files"),
    case("config-binary", "experiments.sweep", "--config {files}/binary.toml", "binary.toml"),
    case("config-missing", "experiments.sweep", "--config {files}/none.toml", "none.toml"),
    case("config-bad-toml", "experiments.sweep", "--config {files}/broken.toml", "broken.toml"),
    case(
        "sweep-links-scalar",
        "experiments.sweep",
        f"{SWEEP_FILE} {{files}}/scalar_links.toml",
        "got 3",
    ),  # fmt: skip
    case("out-is-a-file", "experiments.sweep", "--out {files}/afile", "afile"),
    case("out-under-a-file", "experiments.sweep", "--out {files}/afile/sub", "afile"),
    case("out-corrupt-store", "experiments.sweep", "--out {files}/corrupt", "corrupt"),
    case("out-foreign-sqlite", "experiments.sweep", "--out {files}/foreign", "foreign"),
    case("sweep-dry-run-bad", "experiments.sweep", "--dry-run --rf 3..1", "'3..1'"),
    # -- python -m experiments.store.export --------------------------------------------------------
    case("export-empty-dir", "experiments.store.export", "{files}/emptydir", "emptydir"),
    case("export-corrupt", "experiments.store.export", "{files}/corrupt", "corrupt"),
    case("export-foreign", "experiments.store.export", "{files}/foreign", "foreign"),
    case("export-no-cells", "experiments.store.export", "{files}/nocells", "nocells"),
    case("export-format", "experiments.store.export", "{files}/store --format xml", "'xml'"),
    case(
        "export-out-file", "experiments.store.export", "{files}/store --out {files}/afile", "afile"
    ),
    case("export-run", "experiments.store.export", "{files}/store --run nope", "'nope'"),
    # -- python -m analysis.* ----------------------------------------------------------------
    case("plots-empty-dir", "analysis.plots", "{files}/emptydir", "emptydir"),
    case("plots-run", "analysis.plots", "{files}/store --run nope", "'nope'"),
    case("compare-corrupt", "analysis.compare", "{files}/corrupt", "corrupt"),
    case("compare-no-cells", "analysis.compare", "{files}/nocells", "nocells"),
    case("report-foreign", "analysis.report", "{files}/foreign", "foreign"),
    case("phi-nodes-zero", "analysis.phi", "--nodes 0", "'0'"),
    case("phi-nodes-huge", "analysis.phi", "--nodes 1000000000", "'1000000000'"),
    case("phi-level", "analysis.phi", "--cl SERIAL", "SERIAL"),
    # -- issue 25: classes of bad input, several cases each ----------------------------------
    # files that are not UTF-8 text
    case("trace-binary", "experiments.sweep", "--trace {files}/binary.csv", "binary.csv"),
    case("workload-binary", "experiments.sweep", "--workload {files}/binary.properties", "binary"),
    case("workers-binary", "experiments.sweep", "--workers {files}/binary.ini", "binary.ini"),
    case("inventory-binary", "testbed", f"{HOSTS} {{files}}/binary.ini", "binary.ini"),
    # damaged stores
    case("export-bad-manifest", "experiments.store.export", "{files}/badmanifest", "not JSON"),
    case("plots-bad-manifest", "analysis.plots", "{files}/badmanifest", "not JSON"),
    case("model-bad-manifest", "analysis.model", "{files}/badmanifest --no-report", "not JSON"),
    case("export-no-column", "experiments.store.export", "{files}/nocolumn", "t_start_ns"),
    case("report-no-column", "analysis.report", "{files}/nocolumn", "t_start_ns"),
    # huge ranges and sizes, checked before anything is made of them
    case("cpuset-huge", "experiments.sweep", "--node-cpuset 0-99999999999", "99999999999"),
    case("testbed-cpuset-huge", "testbed", "up --node-cpuset 0-99999999999", "99999999999"),
    case("heap-huge", "experiments.sweep", "--heap-mb 99999999", "99999999"),
    case("predict-huge", "analysis.model", "predict --nodes 1..9 --latency 0..999", "cells"),
    case("predict-sites-nodes", "analysis.model", "predict --sites 3x3 --nodes 4", "hold 9"),
    case("predict-sites-profile", "analysis.model", "predict --profile sites", "needs --sites"),
    case("predict-site-of-zero", "analysis.model", "predict --sites 3,0", "'3,0'"),
    # options the model would have ignored or read as "the default" (issue 42, item 5)
    case("predict-links-unused", "analysis.model", "predict --links {files}/links.toml", "--links"),
    case("predict-nodes-empty", "analysis.model", ["predict", "--nodes", " "], "--nodes is empty"),
    case("predict-rf-empty", "analysis.model", ["predict", "--rf", ""], "--rf is empty"),
    # two spellings of one grid value
    case("latency-twice", "experiments.sweep", "--latency 0.1,0.1000001", "0.1000001"),
    case("workload-twice", "experiments.sweep", "--workload ycsb-a,ycsb-A", "twice"),
    case("fault-twice", "experiments.sweep", "--fault kill:e1@30%,kill:e1@30.0%", "same"),
    # executable files where data is expected (never run)
    case(
        "inventory-executable", "testbed", f"{HOSTS} {{files}}/exec.ini", "did not read all of it"
    ),
    case(
        "workers-executable",
        "experiments.sweep",
        "--workers {files}/exec.ini",
        "did not read all of it",
    ),
    # special filesystems
    case("out-proc", "experiments.sweep", "--out /proc/edgetb-results", "/proc"),
    case("out-sys", "experiments.sweep", "--out /sys/edgetb-results", "/sys"),
    case("export-out-proc", "experiments.store.export", "{files}/store --out /proc/x", "/proc/x"),
    # a link to itself
    case("links-self", "emulation", f"{LINKS} {{files}}/self.toml", "'e0'"),
    case("sweep-links-self", "experiments.sweep", f"{SWEEP_FILE} {{files}}/self.toml", "'e0'"),
]

# argparse: "python -m testbed up: error: ..."; the CLIs themselves: "error: ...".
ERROR_LINE = re.compile(r"^(error: |python -m [\w.]+( [\w-]+)*: error: )")


MARKER_RUN: dict[str, Path] = {}  # what exec.ini touches if it is ever run
INVENTORY = "[edge]\ne0 ansible_host={e0}\n[ep]\nep ansible_host=10.77.0.10\n"


def make_files(files: Path) -> None:
    """The bad (and a few good) inputs the cases read; none of them may change."""
    from analysis.synthetic import make_store
    from experiments.store.db import Store

    files.mkdir()
    for name, text in {
        "port.ini": INVENTORY.format(e0="10.77.0.11 ansible_port=abc"),
        "user.ini": INVENTORY.format(e0="10.77.0.11 ansible_user=-oProxyCommand=x"),
        "host.ini": INVENTORY.format(e0="-oProxyCommand=y"),
        "wdir.ini": "w1 ansible_host=127.0.0.1 ansible_ssh_private_key_file=/etc/hostname "
        "edgetb_worker_dir=relative\n",
        "links.toml": "[default]\ndelay_ms = 5\n",
        "scalar_links.toml": "default = 3\n",
        "badhost.toml": '[[link]]\nsrc = "e0"\ndst = "e99"\ndelay_ms = 1\n',
        "badtype.toml": '[default]\ndelay_ms = "fast"\n',
        "badkey.toml": "[default]\ndelay = 5\n",
        "scalar.toml": "sweep = 3\n",
        "unknown.toml": "[sweep]\nbogus = 1\n",
        "wrongtype.toml": '[sweep]\nwrites = "ten"\n',
        "broken.toml": "[sweep\nnodes = [3]\n",
        "afile": "not a directory\n",
        # thousands of nested arrays: the parsers recursed out of the interpreter's stack
        "deep.toml": "[sweep]\nnodes = " + "[" * 5000 + "]" * 5000 + "\n",
        "deep_links.toml": "[default]\ndelay_ms = " + "[" * 5000 + "]" * 5000 + "\n",
        "extra.csv": "t_s,src,dst,delay_ms\n0,e0,e1,5,7\n",
        "template.ini": "w1 ansible_host=127.0.0.1 ansible_ssh_private_key_file=/etc/hostname "
        "edgetb_worker_dir=/w{{lookup('pipe','touch /tmp/edgetb-pwned')}}\n",
        "half.yml": "all:\n  hosts:\n    w1: {ansible_host: 127.0.0.1}\n    w2: [1, 2]\n",
        "self.toml": '[[link]]\nsrc = "e0"\ndst = "e0"\ndelay_ms = 5\n',
        # a valid inventory script: Ansible's defaults would run it and find host e0
        "exec.ini": f"#!/bin/sh\ntouch {files.parent}/inventory-was-run\n"
        'echo \'{"edge": {"hosts": ["e0"]}, "_meta": {"hostvars": {}}}\'\n',
    }.items():
        (files / name).write_text(text)
    (files / "exec.ini").chmod(0o755)
    for name in ("binary.csv", "binary.properties", "binary.ini"):
        (files / name).write_bytes(b"\xff\xfe" + bytes(range(256)) * 4)
    (files / "binary.toml").write_bytes(bytes(range(256)) * 4)
    (files / "junk.tgz").write_bytes(b"\x1f\x8b\x08\x00" + bytes(range(256)))
    (files / "emptydir").mkdir()
    (files / "corrupt").mkdir()
    (files / "corrupt" / "results.sqlite").write_bytes(b"SQLite format 2\x00" + bytes(2000))
    (files / "foreign").mkdir()
    con = sqlite3.connect(files / "foreign" / "results.sqlite")
    con.execute("CREATE TABLE notes (text TEXT)")
    con.commit()
    con.close()
    Store(files / "nocells").close()
    make_store(files / "store", nodes=(3,), losses=(0.5,), latencies=(0, 50), writes=5)
    for name, damage in (
        ("badmanifest", "UPDATE runs SET manifest = '{not json'"),
        ("nocolumn", "ALTER TABLE requests DROP COLUMN t_start_ns"),
    ):
        make_store(files / name, nodes=(3,), losses=(0.5,), latencies=(0, 50), writes=5)
        con = sqlite3.connect(files / name / "results.sqlite")
        con.execute(damage)
        con.commit()
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.close()
    jar = files / "apache-cassandra-4.1.3" / "lib" / "apache-cassandra-4.1.3.jar"
    jar.parent.mkdir(parents=True)
    jar.write_bytes(b"jar")
    with tarfile.open(files / "c41.tgz", "w:gz") as tar:
        tar.add(files / "apache-cassandra-4.1.3", arcname="apache-cassandra-4.1.3")


def good_state() -> dict:
    from testbed.topology import Topology

    return {
        "run_id": RUN,
        "backend": "netns",
        "topology": Topology(edge_nodes=3).to_dict(),
        "cassandra": None,
        "status": "up",
        "created": 1.0,
        "java": None,
        "namespaces": [],
        "processes": {},
        "parts": {},
    }


def write_state(edgetb_home: Path, edit: str) -> None:
    data = good_state()
    if edit == "unknown-key":
        data["bogus"] = 1
    elif edit == "missing-key":
        del data["topology"]
    elif edit == "wrong-type":
        data["namespaces"] = "x"
    elif edit == "topology-type":
        data["topology"]["edge_nodes"] = "3"
    run_dir = edgetb_home / "runs" / RUN
    run_dir.mkdir(parents=True)
    text = "{not json" if edit == "not-json" else json.dumps(data)
    (run_dir / "state.json").write_text(text)


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` with a hash of its content (directories too). SQLite's
    WAL side files (``-wal``, ``-shm``), which a read-only reader of a WAL store creates
    and which hold no change to the store, are left out."""
    if not root.exists():
        return {}
    out = {}
    for path in sorted(root.rglob("*")):
        if path.name.endswith((".sqlite-wal", ".sqlite-shm")):
            continue
        rel = str(path.relative_to(root))
        out[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    return out


@dataclass
class Outcome:
    argv: list[str]
    returncode: int
    stderr: str
    before: dict[str, dict[str, str]]  # snapshot() of each watched tree, by name
    after: dict[str, dict[str, str]]


def run_case(c: Case, root: Path, files: Path, shim: Path) -> Outcome:
    """Run one case in ``root`` (its own HOME and EDGETB_HOME)."""
    home, edgetb, out, scratch = root / "home", root / "edgetb", root / "out", root / "scratch"
    home.mkdir(parents=True)
    if c.state:
        write_state(edgetb, c.state)
    args = [a.format(files=files, out=out) for a in c.args]
    if c.module == "experiments.sweep" and "--out" not in args:
        args += ["--out", str(out)]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "EDGETB_HOME": str(edgetb),
        "PYTHONPATH": str(shim),
        # Third-party caches (matplotlib's font list, Ansible's local temp) go elsewhere,
        # so that HOME must stay exactly as it was.
        "MPLCONFIGDIR": str(scratch / "mpl"),
        "ANSIBLE_HOME": str(scratch / "ansible"),
        "ANSIBLE_LOCAL_TEMP": str(scratch / "ansible" / "tmp"),
    }
    before = {"root": snapshot(root / "home"), "edgetb": snapshot(edgetb)}
    argv = [sys.executable, "-m", c.module, *args]
    proc = subprocess.run(
        argv,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    after = {"root": snapshot(root / "home"), "edgetb": snapshot(edgetb)}
    if out.exists():
        after["out"] = snapshot(out) or {"": "dir"}
    return Outcome(argv, proc.returncode, proc.stderr, before, after)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Outcome]:
    base = tmp_path_factory.mktemp("bad-input")
    files = base / "files"
    make_files(files)
    MARKER_RUN["path"] = base / "inventory-was-run"
    shim = base / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import os\nos.geteuid = lambda: 65534  # see tests/unit/test_bad_input.py\n"
    )
    files_before = snapshot(files)
    with ThreadPoolExecutor(max_workers=max(2, (os.cpu_count() or 1) * 2)) as pool:
        futures = {
            c.id: pool.submit(run_case, c, base / "cases" / c.id, files, shim) for c in CASES
        }
        results = {cid: f.result() for cid, f in futures.items()}
    results["<files>"] = Outcome([], 0, "", {"files": files_before}, {"files": snapshot(files)})
    return results


def test_the_table_is_large_and_its_ids_unique():
    assert len(CASES) >= 40
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_clear_line_and_changes_nothing(outcomes, c):
    o = outcomes[c.id]
    shown = f"{' '.join(o.argv[2:])}\n--- stderr ---\n{o.stderr}"
    assert "Traceback" not in o.stderr, shown
    assert o.returncode == 2, shown
    lines = [line for line in o.stderr.splitlines() if line.strip()]
    assert lines, shown
    last = lines[-1]
    assert ERROR_LINE.match(last), shown
    assert c.names in last, shown
    assert o.after == o.before, f"{shown}\nchanged: {o.before} -> {o.after}"


def test_no_input_file_was_changed(outcomes):
    o = outcomes["<files>"]
    assert o.after == o.before


def test_no_inventory_script_was_run(outcomes):
    assert outcomes["<files>"].argv == [] and not MARKER_RUN.get("path", Path("/")).exists()

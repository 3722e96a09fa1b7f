"""Root writes results, logs, figures and secrets into directories others may write to: a
name planted there (a symlink to a file of the system, a FIFO) is never written through
and never blocks; secrets are owner-only from creation (common.files and its users)."""

import os
import stat
import tarfile
import types

import pytest

from analysis.figsave import plt, save_figure
from common.files import UnsafeFileError, append_to, replacing, write_file
from experiments.store.export import _write
from testbed.backends.remote import RemoteBackend
from testbed.ownership import OwnerLock


@pytest.fixture
def victim(tmp_path):
    """A file of someone else's that a planted symlink points to."""
    path = tmp_path / "victim"
    path.write_text("precious\n")
    return path


def plant(path, victim):
    path.symlink_to(victim)
    return path


def test_replacing_replaces_a_planted_link_and_keeps_nothing_on_failure(tmp_path, victim):
    target = plant(tmp_path / "report.html", victim)
    write_file(target, "ours")
    assert victim.read_text() == "precious\n" and not target.is_symlink()
    assert target.read_text() == "ours"
    secret = tmp_path / "secret"
    old = os.umask(0)
    try:
        write_file(secret, b"key", perm=0o600)
    finally:
        os.umask(old)
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    with pytest.raises(RuntimeError), replacing(tmp_path / "half.csv") as f:
        f.write("a,b\n")
        raise RuntimeError("the disk filled")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "secret", "victim"]


def test_a_lock_or_log_on_a_planted_name_is_refused(tmp_path, victim):
    lock = OwnerLock(plant(tmp_path / "sweep.lock", victim))
    with pytest.raises(UnsafeFileError, match="sweep.lock is a symbolic link"):
        lock.acquire(blocking=False)
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        lock.holder()
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        append_to(plant(tmp_path / "worker.log", victim))
    fifo = tmp_path / "shaper.log"
    os.mkfifo(fifo)
    with pytest.raises(UnsafeFileError, match="not a regular file"):
        append_to(fifo)  # neither blocks nor writes
    assert victim.read_text() == "precious\n"
    with append_to(tmp_path / "fresh.log") as log:
        log.write("one line\n")
    assert (tmp_path / "fresh.log").read_text() == "one line\n"


def test_figures_exports_and_the_report_replace_planted_names(tmp_path, victim):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    for fmt in ("png", "svg", "pdf"):
        plant(tmp_path / f"rtt.{fmt}", victim)
    paths = save_figure(fig, tmp_path, "rtt")
    assert all(not p.is_symlink() and p.stat().st_size > 0 for p in paths)
    assert (tmp_path / "rtt.png").read_bytes().startswith(b"\x89PNG")
    plant(tmp_path / "requests.csv", victim)
    _write(tmp_path / "requests.csv", "csv", ("a", "b"), [(1, 2)], 100)
    assert (tmp_path / "requests.csv").read_text().splitlines() == ["a,b", "1,2"]
    plant(tmp_path / "requests.parquet", victim)
    _write(tmp_path / "requests.parquet", "parquet", ("run_id", "seq"), [("r", 1)], 100)
    assert (tmp_path / "requests.parquet").read_bytes()[:4] == b"PAR1"
    assert victim.read_text() == "precious\n"


def test_the_report_replaces_its_planted_page_and_temporary_name(tmp_path, victim):
    """report.html and the name it is first written under, planted as links in a results
    directory someone else can write to: the page replaces the links, the victim stays."""
    from analysis.report import write_report
    from analysis.results import load
    from analysis.synthetic import make_store

    make_store(tmp_path, nodes=(3,), losses=(0.5,), latencies=(0, 50), writes=20)
    for name in ("report.html", "report.html.tmp", ".report.html.tmp"):
        plant(tmp_path / name, victim)
    page = write_report(load(tmp_path))
    assert not page.is_symlink() and page.read_text().startswith("<!doctype html>")
    assert victim.read_text() == "precious\n"


def test_archives_of_secrets_are_owner_only_from_creation(tmp_path):
    """The node's keystore and the run's password go to hosts in these archives."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "cassandra.yaml").write_text("x: 1\n")
    backend = types.SimpleNamespace(ansible_dir=tmp_path / "ansible")
    old = os.umask(0)
    try:
        path = RemoteBackend._conf_archive(backend, "e0", conf)  # type: ignore[arg-type]
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with tarfile.open(path) as tar:
        assert tar.getnames() == ["cassandra.yaml"]
    # the client's login and certificates (endpoint.tar), planted first as a link
    run_dir = tmp_path / "run"
    (run_dir / "tls").mkdir(parents=True)
    (run_dir / "credentials").write_text("user\npassword\n")
    (run_dir / "tls" / "client.pem").write_text("key\n")
    backend.state = types.SimpleNamespace(run_dir=run_dir)
    (tmp_path / "elsewhere").write_text("not ours\n")
    (tmp_path / "ansible" / "endpoint.tar").symlink_to(tmp_path / "elsewhere")
    old = os.umask(0)
    try:
        files = [run_dir / "credentials", run_dir / "tls" / "client.pem"]
        endpoint = RemoteBackend._endpoint_archive(backend, files)  # type: ignore[arg-type]
    finally:
        os.umask(old)
    assert endpoint is not None and not endpoint.is_symlink()
    assert stat.S_IMODE(endpoint.stat().st_mode) == 0o600
    assert (tmp_path / "elsewhere").read_text() == "not ours\n"
    with tarfile.open(endpoint) as tar:
        assert sorted(tar.getnames()) == ["credentials", "tls", "tls/client.pem"]


@pytest.mark.parametrize("name", ["results.sqlite", "results.sqlite-wal", "results.sqlite-shm"])
def test_the_store_refuses_its_files_planted_as_links(tmp_path, victim, name):
    from experiments.store.db import DB_NAME, StateFileError, Store

    assert name.startswith(DB_NAME)
    if name != DB_NAME:
        Store(tmp_path).close()  # a real store, then its WAL or shared memory planted
    plant(tmp_path / name, victim)
    with pytest.raises(StateFileError, match="is a symbolic link"):
        Store(tmp_path)
    assert victim.read_text() == "precious\n"


def test_a_full_disk_while_exporting_is_one_line_and_leaves_nothing(tmp_path, capsys):
    """ENOSPC (a full results disk, a quota) ended the export in a traceback; it is the
    machine's refusal: one line, exit 1, no half-written file or temporary name left."""
    import subprocess

    from experiments.store.db import Store
    from experiments.store.export import main as export_main

    store_dir, full = tmp_path / "results", tmp_path / "full"
    from tests.unit.test_store import cell, requests

    with Store(store_dir) as s:
        s.begin_run("run1", "fp", "test", {"writes": 2}, {})
        s.commit_cell(cell(), requests(n=2000))  # more than the disk's 64 KB as CSV
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], check=True)
    try:
        fd = os.open(full / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:  # the disk full to the last block
            while os.write(fd, b"x" * 512):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        assert export_main([str(store_dir), "--out", str(full / "export")]) == 1
        # the directory it made is gone again: nothing half-written, no temporary name
        assert [p.name for p in full.iterdir()] == ["filler"]
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith(f"error: {full / 'export'}/") and line.endswith(
            "No space left on device (the disk or its quota is full)"
        ), line
    finally:
        subprocess.run(["umount", str(full)], check=True)


def test_the_full_disk_line(capsys):
    from common.command import command

    @command("python -m x")
    def main(argv=None) -> int:
        raise OSError(28, "No space left on device", "/data/export/requests.csv")

    assert main([]) == 1
    assert capsys.readouterr().err == (
        "error: /data/export/requests.csv: No space left on device "
        "(the disk or its quota is full)\n"
    )

"""The Cassandra distribution: what `dist install --tarball` accepts (tiny tarballs in a
temp dir; nothing is installed)."""

import io
import tarfile

import pytest

from common.errors import ConfigError
from testbed.cassandra import dist


def _tarball(path, *names):
    with tarfile.open(path, "w:gz") as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 3
            tar.addfile(info, io.BytesIO(b"jar"))
    return path


def test_the_apache_binary_tarball_of_our_version_is_accepted(tmp_path):
    good = _tarball(
        tmp_path / "c.tar.gz",
        "apache-cassandra-5.0.6/lib/apache-cassandra-5.0.6.jar",
        "apache-cassandra-5.0.6/lib/guava-32.jar",
    )
    dist.check_tarball(good, "5.0.6")
    installed = dist.install(tarball=good, root=tmp_path / "cache", progress=lambda _m: None)
    assert installed.version == "5.0.6" and installed.source == f"tarball:{good}"
    assert sorted(installed.jars) == ["apache-cassandra-5.0.6.jar", "guava-32.jar"]
    assert (installed.lib_dir / "guava-32.jar").read_bytes() == b"jar"


@pytest.mark.parametrize(
    "names, message",
    [
        (
            ["apache-cassandra-4.1.3/lib/apache-cassandra-4.1.3.jar"],
            "holds apache-cassandra-4.1.3; this testbed runs Cassandra 5.0.6",
        ),
        (["src/lib/guava-32.jar"], r"not an Apache Cassandra binary tarball \(no lib/"),
        (["apache-cassandra-5.0.6.jar"], "not an Apache Cassandra binary tarball"),
    ],
)
def test_other_tarballs_are_refused(tmp_path, names, message):
    with pytest.raises(ConfigError, match=message):
        dist.check_tarball(_tarball(tmp_path / "c.tar.gz", *names), "5.0.6")


def test_files_that_are_no_tarball_are_refused_before_anything_is_made(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGETB_CACHE", str(tmp_path / "cache"))
    (tmp_path / "junk.tar.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    for path, message in [
        (tmp_path / "junk.tar.gz", "is not a readable tar archive"),
        (tmp_path / "none.tar.gz", "tarball not found"),
        (tmp_path, "is not a file"),
    ]:
        with pytest.raises(ConfigError, match=message):
            dist.install(tarball=path, progress=lambda _m: None)
    assert not (tmp_path / "cache").exists()

import os
import tempfile

import pytest

# Tests keep their runs apart from a researcher's own (~/.edgetb); the Cassandra cache
# (~/.cache/edgetb) is shared so it is assembled once.
os.environ.setdefault("EDGETB_HOME", tempfile.mkdtemp(prefix="edgetb-tests-"))


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root: network namespaces and Cassandra processes")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)

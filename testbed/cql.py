"""``python -m testbed.cql STATEMENT...``: run CQL from a testbed host (see testbed.client)."""

import sys

from .client import main

if __name__ == "__main__":
    sys.exit(main(["cql", *sys.argv[1:]]))

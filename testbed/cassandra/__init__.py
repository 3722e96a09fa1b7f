"""Cassandra on the testbed: distribution, per-node configuration, process lifecycle."""

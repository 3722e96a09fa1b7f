"""A stand-in for ``experiments.remote.tasks.measure_unit`` in the unit tests of the Dask
controller (``tests/unit/test_workers.py``): it measures nothing (a cell is two made-up
requests) and behaves as ``$FAKE_MODE`` of its worker process says: ``good``; ``die``
(the process exits in its second unit); ``hang`` (the process stops itself in its
second unit); ``fail`` (a unit at 20 ms raises); ``short`` (its first unit returns only
its first cell, as a unit cut short would)."""

import os
import signal
import time

from distributed import get_worker

from common.errors import TestbedError

_units = [0]


def measure_unit(run_id, config_data, links, slot, cell_ids):
    mode = os.environ.get("FAKE_MODE", "good")
    _units[0] += 1
    if mode == "fail" and "-l20-" in cell_ids[0]:
        raise TestbedError("Cassandra died")
    if mode in ("die", "hang") and _units[0] == 2:
        time.sleep(0.2)
        if mode == "die":
            os._exit(9)
        os.kill(os.getpid(), signal.SIGSTOP)
    cells = []
    for cell_id in cell_ids:
        nodes, rf = int(cell_id[1]), int(cell_id.split("-rf")[1][0])
        cell = {"run_id": "theirs", "cell_id": cell_id, "nodes": nodes, "rf": rf, "cl": "ONE",
                "policy": "rr", "profile": "uniform", "latency_ms": 1.0, "loss_pct": 0.5,
                "repetition": 1, "writes": 2, "warmup": 0, "key_seed": "1", "shaping": {},
                "testbed_run": "abcdef", "started": 1.0, "finished": 2.0, "shard": f"s{slot}",
                "cpu_util": 0.1}  # fmt: skip
        requests = [{"run_id": "theirs", "cell_id": cell_id, "seq": i, "key": "k",
                     "coordinator": "e0", "replicas": "e0", "coordinator_is_replica": 1,
                     "rtt_ns": 1000 + i, "error": None, "t_start_ns": i}
                    for i in range(2)]  # fmt: skip
        cells.append({"cell": cell, "requests": requests, "ycsb_ops": [], "ycsb_requests": []})
        time.sleep(0.05)
    if mode == "short" and _units[0] == 1:
        cells = cells[:1]
    return {"worker": get_worker().name, "cells": cells}


def close_run(run_id, status="complete"):
    return True

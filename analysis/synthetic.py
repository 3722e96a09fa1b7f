"""A synthetic results store with known answers, for tests and the plotting benchmark.

RTTs are drawn from a normal distribution around ``mean_ms(nodes, rf, latency, loss)``;
coordinators follow round robin and replicas are drawn so that the coordinator is a
replica with probability RF/n. Nothing here touches a testbed.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from experiments.store.db import Store


def paper_like(nodes: int, rf: int, latency: float, loss: float) -> float:
    """10 ms to the endpoint, 2L to a replica, plus loss cost growing with φ-like need."""
    need = 1.0 if rf > 1 else 1 - 1 / nodes
    return 5 + 10 + need * 2 * latency * (1 + loss / 100 * (3.0 if rf == 2 else 1.0))


def make_store(
    directory: str | Path,
    *,
    nodes: Sequence[int] = (3, 4, 5),
    losses: Sequence[float] = (0.5, 2.5, 7.5),
    latencies: Sequence[float] = tuple(range(0, 101, 10)),
    writes: int = 1000,
    mean_ms: Callable[[int, int, float, float], float] = paper_like,
    sd_ms: float = 2.0,
    seed: int = 0,
    run_id: str = "synthetic",
    fingerprint: str = "synthetic",
    status: str = "complete",
    repetitions: int = 1,
    rep_sd_ms: float = 0.0,
) -> Path:
    """A store in ``directory`` (made, or added to) holding one run of the given grid,
    each cell ``repetitions`` times; a repetition's writes are shifted together by a
    normal offset of sd ``rep_sd_ms`` (what differs between two runs of a cell)."""
    rng = random.Random(seed)
    store = Store(directory)
    config = {
        "nodes": list(nodes),
        "loss_pct": list(losses),
        "latency_ms": list(latencies),
        "writes": writes,
        "repetitions": repetitions,
        "cl": "LOCAL_QUORUM",
        "name": "synthetic",
    }
    store.begin_run(run_id, fingerprint, "synthetic", config, {"synthetic": True})
    t = time.time()
    for n in nodes:
        names = [f"e{i}" for i in range(n)]
        for loss in losses:
            for lat in latencies:
                for rf, rep in itertools.product(range(1, n + 1), range(1, repetitions + 1)):
                    cell_id = f"n{n}-rf{rf}-l{lat:g}-p{loss:g}-r{rep}"
                    mu = mean_ms(n, rf, lat, loss)
                    if repetitions > 1:
                        mu += rng.gauss(0, rep_sd_ms)
                    reqs = _requests(rng, run_id, cell_id, names, rf, writes, mu, sd_ms)
                    store.commit_cell(
                        _cell(run_id, cell_id, n, rf, lat, loss, rep, writes, t), reqs
                    )
                    t += 1
    store.set_status(run_id, status)
    store.close()
    return Path(directory)


def _requests(rng, run_id, cell_id, names, rf, writes, mu, sd_ms) -> list[dict[str, Any]]:  # noqa: ANN001
    """A cell's writes: round-robin coordinators, ``rf`` random replicas each, RTTs
    normal around ``mu`` (ms) with sd ``sd_ms``."""
    reqs = []
    for seq in range(writes):
        coord = names[seq % len(names)]
        replicas = rng.sample(names, rf)
        reqs.append(
            {
                "run_id": run_id,
                "cell_id": cell_id,
                "seq": seq,
                "key": f"{cell_id}-{seq}",
                "coordinator": coord,
                "replicas": ",".join(replicas),
                "coordinator_is_replica": int(coord in replicas),
                "rtt_ns": max(1, int(rng.gauss(mu, sd_ms) * 1e6)),
                "error": None,
                "t_start_ns": seq,
            }
        )
    return reqs


def _cell(run_id, cell_id, n, rf, lat, loss, rep, writes, t) -> dict[str, Any]:  # noqa: ANN001
    return {
        "run_id": run_id,
        "cell_id": cell_id,
        "nodes": n,
        "rf": rf,
        "cl": "LOCAL_QUORUM",
        "policy": "round-robin",
        "profile": "paper",
        "latency_ms": float(lat),
        "loss_pct": float(loss),
        "repetition": rep,
        "writes": writes,
        "warmup": 0,
        "key_seed": "synthetic",
        "shaping": {"synthetic": True},
        "testbed_run": "none",
        "started": t,
        "finished": t,
    }

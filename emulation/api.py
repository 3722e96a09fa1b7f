"""Set, clear and show the emulated network of a running testbed."""

from __future__ import annotations

from typing import Any

from testbed.testbed import Testbed

from . import shapers
from .links import Link, LinkMatrix


def set_links(tb: Testbed, matrix: LinkMatrix, shaper: str = "auto") -> dict[str, Any]:
    """Apply ``matrix`` while everything keeps running; returns shaper and timings."""
    s = shapers.for_testbed(tb, shaper)
    setup_s = s.start()
    change_s = s.apply(matrix)
    rec = shapers.emulation(tb)
    rec.shaper = s.name
    rec.loss_location = s.loss_location
    rec.matrix = matrix.to_dict()
    assert tb.state is not None  # for_testbed checked it
    tb.state.save()
    return {"shaper": s.name, "setup_s": setup_s, "change_s": change_s}


def clear(tb: Testbed, *, remove: bool = False) -> None:
    """Every link back to unshaped; ``remove`` also takes the shaper (and gateway) away."""
    rec = shapers.emulation(tb)
    if rec.shaper is None:
        return
    s = shapers.REGISTRY[rec.shaper](tb)
    assert tb.state is not None  # emulation() checked it
    if remove:
        s.stop()
        tb.state.drop(shapers.EmulationRecord)
    else:
        s.apply(LinkMatrix(tb.topology, {}, profile="none"))
        rec.matrix = {"profile": "none", "links": []}
    tb.state.save()


def show(tb: Testbed) -> dict[str, Any]:
    rec = shapers.emulation(tb)
    result: dict[str, Any] = {"shaper": rec.shaper, "matrix": rec.matrix, "tc": []}
    if rec.shaper:
        result["tc"] = shapers.REGISTRY[rec.shaper](tb).show()
    return result


def problems(tb: Testbed, *, thorough: bool = False) -> list[str]:
    """What is broken in the emulation of ``tb`` (a dead gateway VM; when ``thorough``,
    shaping that is gone from a host or the gateway). Empty when it looks intact."""
    rec = shapers.emulation(tb)
    if not rec.shaper:
        return []
    return shapers.REGISTRY[rec.shaper](tb).problems(thorough=thorough)


def configured(tb: Testbed) -> LinkMatrix:
    """The matrix last applied to ``tb`` (unshaped when none)."""
    data = shapers.emulation(tb).matrix or {"profile": "none", "links": []}
    links = {
        (l["src"], l["dst"]): Link(l["delay_ms"], l["jitter_ms"], l["loss_pct"], l["rate_mbit"])
        for l in data["links"]
    }
    return LinkMatrix(tb.topology, links, profile=data["profile"])

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
    state = shapers.emulation_state(tb)
    state["shaper"] = s.name
    state["loss_location"] = s.loss_location
    state["matrix"] = matrix.to_dict()
    assert tb.state is not None  # for_testbed checked it
    tb.state.save()
    return {"shaper": s.name, "setup_s": setup_s, "change_s": change_s}


def clear(tb: Testbed, *, remove: bool = False) -> None:
    """Every link back to unshaped; ``remove`` also takes the shaper (and gateway) away."""
    state = shapers.emulation_state(tb)
    if "shaper" not in state:
        return
    s = shapers.REGISTRY[state["shaper"]](tb)
    if remove:
        s.stop()
        state.clear()
    else:
        s.apply(LinkMatrix(tb.topology, {}, profile="none"))
        state["matrix"] = {"profile": "none", "links": []}
    assert tb.state is not None  # emulation_state checked it
    tb.state.save()


def show(tb: Testbed) -> dict[str, Any]:
    state = shapers.emulation_state(tb)
    result: dict[str, Any] = {
        "shaper": state.get("shaper"),
        "matrix": state.get("matrix"),
        "tc": [],
    }
    if state.get("shaper"):
        result["tc"] = shapers.REGISTRY[state["shaper"]](tb).show()
    return result


def problems(tb: Testbed, *, thorough: bool = False) -> list[str]:
    """What is broken in the emulation of ``tb`` (a dead gateway VM; when ``thorough``,
    shaping that is gone from a host or the gateway). Empty when it looks intact."""
    state = shapers.emulation_state(tb)
    if not state.get("shaper"):
        return []
    return shapers.REGISTRY[state["shaper"]](tb).problems(thorough=thorough)


def configured(tb: Testbed) -> LinkMatrix:
    """The matrix last applied to ``tb`` (unshaped when none)."""
    data = shapers.emulation_state(tb).get("matrix") or {"profile": "none", "links": []}
    links = {
        (l["src"], l["dst"]): Link(l["delay_ms"], l["jitter_ms"], l["loss_pct"], l["rate_mbit"])
        for l in data["links"]
    }
    return LinkMatrix(tb.topology, links, profile=data["profile"])

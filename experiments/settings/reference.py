"""docs/sweep-settings.md, made from the settings' table (``SweepConfig``'s knobs)."""

from __future__ import annotations

from .config import GROUP_TITLES, KNOBS, flag_of, shown_default


def settings_reference() -> str:
    """docs/sweep-settings.md: every setting, made from the table (a unit test checks
    that the file is current)."""
    lines = [
        "# Sweep settings",
        "",
        "Made from `experiments/settings/config.py` (`SweepConfig`); do not edit by hand.",
        "Each setting is a key of a `--config` file's `[sweep]` table and, where it has one,",
        "a flag of `edgetb sweep`; flags override the file, the file the defaults.",
        "Lists take `0,20,40` or ascending ranges `a..b` / `a..b..step`; a grid dimension",
        "makes cells of each of its values.",
    ]
    for group, title in GROUP_TITLES.items():
        lines += ["", f"## {title}", "", "| setting | flag | default | |", "|---|---|---|---|"]
        for name, knob_ in KNOBS.items():
            if knob_.group != group:
                continue
            flag = f"`{flag_of(name)}`" if flag_of(name) else ""
            what = knob_.help + (f" ({'/'.join(knob_.choices)})" if knob_.choices else "")
            what += "; a grid dimension" if knob_.grid else ""
            default = "" if knob_.kind is bool else f"`{shown_default(name)}`"
            lines.append(f"| `{name}` | {flag} | {default} | {what} |")
    return "\n".join(lines) + "\n"

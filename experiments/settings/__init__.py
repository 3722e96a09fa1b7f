"""What a sweep measures, as values (pure: nothing here touches the system).

``fields`` (each setting's ``Knob``: type, range, choices, list syntax), ``config``
(``SweepConfig``: defaults, presets, TOML and flags, frozen once checked), ``checks``
(each setting's own checks, then those between settings), ``cells`` (the grid's points,
their identity and order), ``faults`` (the fault language: what happens to which hosts
and when).
"""

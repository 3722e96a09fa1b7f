"""One machine's engine: P shards, each a testbed of its own, measuring units of cells.

Top-down: ``launch`` (what a sweep checks and holds before its first testbed),
``scheduler`` (the shards and their testbeds), ``units`` (the cells of one network
setting), ``measure`` (one cell: its workload inside its ``conditions``), ``conditions``
and ``nemesis`` (a trace replayed and a fault applied while it runs), ``watch`` (the
components a cell depends on), then what the engine reports: ``progress``, ``manifest``,
``summary``, ``figures``.
"""

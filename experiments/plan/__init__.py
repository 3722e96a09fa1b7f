"""How a sweep's cells spread over testbeds, and how long that takes (no testbed here).

``shards`` (the rules the running sweep and its estimate share: longest first, CPU-bound
work alone, set-up never beside a measurement), ``estimate`` (the dry run's and the ETA's
cost model), ``fidelity`` (the largest P the fidelity benchmark accepted on this
machine), ``calibration`` (this machine's measured costs, kept between sweeps).
"""

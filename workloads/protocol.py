"""What the writer process (``python -m workloads.writes``) and those who read its output
agree on: the fields of its rows and the table it writes. A module of its own, so that
importing ``workloads`` does not import the writer, which runs as ``__main__`` (runpy
warned in every worker log that it had been imported first)."""

ROW_FIELDS = ("seq", "key", "coordinator", "replicas", "rtt_ns", "error", "t_start_ns")
TABLE = "laureates"

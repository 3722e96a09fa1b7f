"""The results store: the only SQL of the project.

``db`` (one SQLite file per results directory: schema and migrations, reads and writes,
``Store``), ``export`` (the store as one row per request, CSV or Parquet:
``edgetb export``).
"""

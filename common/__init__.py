"""What every layer of the tool uses, below all of them (standard library only):

- ``errors``: the one error model (a ``TestbedError`` and its kinds, one line each);
- ``command``: how a command ends (an error's line and exit code, Ctrl-C, SIGTERM);
- ``inputs``: values a user types or hands in, read with bounds before anything changes;
- ``files``: reading and writing files safely (size limits, no symlinks followed, atomic
  replacement, the tail of a log);
- ``runner``: external commands, argument lists in and checked results out;
- ``procs``: processes this tool started, ended by PID only while they are still its own;
- ``tags``: the tag every process of a run carries, and finding them by it;
- ``paths``: every ``EDGETB_*`` variable and where the tool keeps its files;
- ``keyed_cache``: build outputs in the cache under a key of their inputs.

Nothing here imports a package of the tool: ``tests/unit/test_layers.py`` checks it.
"""

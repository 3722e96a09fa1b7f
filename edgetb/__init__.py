"""`edgetb`: the one command of the project, above every layer (it only dispatches to the
command lines of testbed, emulation, experiments and analysis)."""

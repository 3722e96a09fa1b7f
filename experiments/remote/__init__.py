"""The Dask engine: a sweep's units measured on other machines, committed by the
controller into its one store (docs/design/workers.md).

Controller side: ``dask_cluster`` (the scheduler of our own, or the user's, and the
engine ``api`` runs), ``controller`` (units submitted, results committed), ``workers``
(which joined, which are gone), ``fleet`` (the machines of an inventory, provisioned).
Worker side: ``worker`` (``python -m experiments.remote.worker``: a machine's Dask worker
and the commands the controller runs there), ``tasks`` (the Dask tasks it runs).
"""

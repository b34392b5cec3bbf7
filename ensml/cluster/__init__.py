"""Running a verb on a dask cluster: local processes, SLURM or PBS jobs, or a running scheduler.

Shared by ``postprocess``, ``evaluate`` and ``report``: the options (:mod:`.options`:
``cluster``, ``jobqueue``), the connection to the cluster (:mod:`.connection`), its supervisor
(:mod:`.supervisor`: bounded waits, the batch system's reasons, no job left behind), the batch
systems' command-line clients (:mod:`.batch`) and signals during a run (:mod:`.interrupt`).
Importing this package or :mod:`.options` loads no dask.
"""

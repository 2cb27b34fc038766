"""The ``daskpca`` command: batch jobs from the shell, on an embedded or remote Dask cluster.

It owns the command itself (:mod:`.command`: config → cluster → io → estimator → io, no math), where
a job runs (:mod:`.cluster`: the threaded scheduler, an embedded or a given Dask cluster), its
options, their checks and their mapping onto estimator parameters (:mod:`.options`), the mapping of failures to exit codes and one-line
messages (:mod:`.errors`), what a job prints (:mod:`.summary`: the variance table, the account of
the run, ``--json``), the demo's sample data (:mod:`.demo`) and the report folder (:mod:`.report`:
PNG figures and ``summary.md`` drawn with :mod:`daskpca.plot`). Its progress line is the solvers' pass reporter
(:class:`daskpca.passes._progress.ProgressLine`, also ``daskpca.progress()`` in notebooks).

It sits at the top of the import order: it may import everything public in daskpca (the
estimators, :mod:`daskpca.io`, :mod:`daskpca.plot`, the store layer); nothing in daskpca imports
it. ``daskpca.cli:main`` is the console script's entry point; ``python -m daskpca.cli`` runs it too.
"""

from .command import main

__all__ = ["main"]

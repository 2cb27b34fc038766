"""The store layer: everything that puts bytes on disk or in an object store and reads them back.

It holds bytes only: atomic publishing of a finished store (:mod:`.publish`: folder exchange locally, a
versioned pointer on object stores, history and rollback), claims that give each output one writer
(:mod:`.claims`), conditional object-store primitives (:mod:`.objects`), the integrity record of
every object's name and checksum (:mod:`.integrity`) and the solvers' resumable checkpoints
(:mod:`.checkpoint`).

Its public face is :mod:`daskpca.io` (readers and writers users call); the modules here are
internal. What the bytes of a model mean is the estimator layer's (:mod:`daskpca.models._format`).
What it may import: :mod:`daskpca.exceptions` only — it is the bottom layer (tests/test_layers.py).
The solvers never import it: they write checkpoints through the interface they receive
(:func:`daskpca.solvers._base.open_checkpoint`), a :class:`.checkpoint.CheckpointFile` that
:func:`daskpca._features.solve` opens.
"""

"""The store layer: everything that puts bytes on disk or in an object store and reads them back.

It owns the model's format (:mod:`.model`: ``save`` / ``load`` / ``to_dataset`` of a fitted
estimator), atomic publishing of a finished store (:mod:`.publish`: folder exchange locally, a
versioned pointer on object stores, history and rollback), claims that give each output one writer
(:mod:`.claims`), conditional object-store primitives (:mod:`.objects`), the integrity record of
every object's name and checksum (:mod:`.integrity`) and the solvers' resumable checkpoints
(:mod:`.checkpoint`).

Its public face is :mod:`daskpca.io` (readers and writers users call); the modules here are
internal. What it may import: :mod:`daskpca.exceptions`, :mod:`daskpca._version`, and — for the
model's format only — the estimators' pieces it serialises (the fit stages, the labeled layer).
What must not import it: nothing below the estimators except :mod:`.checkpoint` (the solvers save
their state through it); it never imports an estimator module at import time, nor the CLI.
"""

"""The pass machinery: what one pass over the source does, whichever solver asked for it.

A pass is one full read of the input. Every solver, the feature stage, projection and the
coupled and EOF estimators read through the same pieces, one module each, in the order of the
data's road:

- decode (:mod:`._decode`): a task's stored chunks through zarrs' Rust codec pipeline where it
  can, zarr-python otherwise;
- geometry and strips (:mod:`._geometry`): how many storage chunks one task reads (never the
  store's chunking), the workers it runs on, the column-strip re-layout;
- graph reductions (:mod:`._graph`): one task per row block or column strip, tree reductions,
  operands shared as one key;
- moments (:mod:`._moments`): exact mergeable count / mean / scatter, centred on shifts from the
  data; the sketch kernel (:mod:`._sketch`): the one-read X̃ᵀ·orth(X̃Ω) of the randomized and
  block Krylov solvers; the small local solves between passes (:mod:`._linalg`: eigen- and
  singular-value problems, BLAS threads);
- the pass cache (:mod:`._cache`, raw chunk copies in :mod:`._copies`): the first read keeps the
  blocks and later passes read those;
- device dispatch (:mod:`._device`): the block's array library (NumPy, CuPy) and the few calls
  each makes differently;
- progress (:mod:`._progress`): what a solver says around each pass, and who listens.

**Imports.** This package sits below the solvers (:mod:`daskpca.solvers`, whose contract —
:class:`~daskpca.solvers._base.SolverResult`, the cost model's inputs — it never imports) and
above input validation (:mod:`daskpca._validation`), the store's scratch folders
(:mod:`daskpca.store.scratch`) and :mod:`daskpca.exceptions`. Other packages import the names
below from ``daskpca.passes``, never its private modules (tests/test_layers.py enforces both).
"""

from ._cache import (choose, choose_each, for_fit, format_bytes, gather, job, job_facts, later_reads, lookup,
                     what_later_passes_read)
from ._decode import local_root, zarr_arrays
from ._device import (DEVICE_NAMES, EIGH_FLOPS, FLOAT64_BYTES, NUMPY, SVD_FLOPS, backend_of, device_fan_in, device_memory,
                      like, meta_of, moved_from_host, namespace, on_device, rate, solve_on_device,
                      to_device, to_host)
from ._geometry import (TASK_MEMORY_FRACTION, ColumnStrips, Geometry, current_client, device_merge_fan_in,
                        device_task_bytes, device_threads, geometry_of, needs_column_strips, on_column_strips,
                        plain_source, regroup, relaid_out, remember, strip_columns, ungrouped, what_runs, worker_infos,
                        worker_resources)
from ._graph import SizedByArrays, map_column_blocks, map_row_blocks, merge_task_bytes, share, shared, tree_reduce
from ._linalg import (DEFLATION_RTOL, LANCZOS_MAX_FRACTION, LANCZOS_MIN_SIZE, Basis, client_blas_threads, eigh_descending,
                      eigh_descending_on_device, flip_signs, one_blas_thread, orthonormal_extension, tall_norm2, tall_qr,
                      top_eigenpairs, tuned_for_tasks)
from ._moments import (MERGE_SPLIT_EVERY, Moments, center_block, chunk_moments, combine_moments, combine_moments_pooled,
                       merge_shifted_means, row_shift)
from ._progress import EARLIER_FIT, PassClock, Passes, ProgressLine, format_seconds, progress, watched
from ._sketch import (SKETCH_FLOPS_PER_SECOND, check_oversamples, feature_fingerprint, fuses_features,
                      leading_right_vectors, pass_input, releases_slab_buffers, resumed_stage, run_first_pass, run_pass,
                      sketch_task_bytes, stage_state, staged_slabs, staged_task_bytes)

__all__ = [
    # the pass cache
    "choose", "choose_each", "for_fit", "format_bytes", "gather", "job", "job_facts", "later_reads", "lookup", "what_later_passes_read",
    # decode
    "local_root", "zarr_arrays",
    # device dispatch
    "DEVICE_NAMES", "EIGH_FLOPS", "FLOAT64_BYTES", "NUMPY", "SVD_FLOPS", "backend_of", "device_fan_in", "device_memory",
    "like", "meta_of", "moved_from_host", "namespace", "on_device", "rate", "solve_on_device",
    "to_device", "to_host",
    # geometry and strips
    "TASK_MEMORY_FRACTION", "ColumnStrips", "Geometry", "current_client", "device_merge_fan_in", "device_task_bytes",
    "device_threads", "geometry_of", "needs_column_strips", "on_column_strips", "plain_source", "regroup", "relaid_out", "remember", "ungrouped",
    "strip_columns", "what_runs", "worker_infos", "worker_resources",
    # graph reductions
    "SizedByArrays", "map_column_blocks", "map_row_blocks", "merge_task_bytes", "share", "shared", "tree_reduce",
    # local solves between passes
    "DEFLATION_RTOL", "LANCZOS_MAX_FRACTION", "LANCZOS_MIN_SIZE", "Basis", "one_blas_thread", "client_blas_threads", "eigh_descending",
    "eigh_descending_on_device", "flip_signs", "orthonormal_extension", "tall_norm2", "tall_qr", "top_eigenpairs",
    "tuned_for_tasks",
    # moments
    "MERGE_SPLIT_EVERY", "Moments", "center_block", "chunk_moments", "combine_moments", "combine_moments_pooled",
    "merge_shifted_means", "row_shift",
    # progress
    "EARLIER_FIT", "PassClock", "Passes", "ProgressLine", "format_seconds", "progress", "watched",
    # the sketch kernel
    "SKETCH_FLOPS_PER_SECOND", "check_oversamples", "feature_fingerprint", "fuses_features", "leading_right_vectors",
    "pass_input", "releases_slab_buffers", "resumed_stage", "run_first_pass", "run_pass", "sketch_task_bytes",
    "stage_state", "staged_slabs", "staged_task_bytes",
]

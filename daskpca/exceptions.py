"""The errors and warnings daskpca raises, in one place (as ``sklearn.exceptions``).

Import them from here: ``from daskpca.exceptions import NotFittedError``. The modules that raise
them import them from here too, so an ``except`` clause never depends on where a class was born.
"""

from __future__ import annotations


class InputError(ValueError):
    """The caller's data, parameters or usage is wrong; the message names the value, the form
    expected and the fix. Every check daskpca makes on what it is given raises this class or a
    subclass (the CLI's exit code 2), so a ``ValueError`` from NumPy, zarr or dask deep inside is
    never mistaken for one: that is a runtime or internal failure (exit code 1)."""


class InputTypeError(InputError, TypeError):
    """An :class:`InputError` about the kind of object given (also a ``TypeError``)."""


class NotFittedError(InputError, AttributeError):
    """Raised when a method that needs a fitted model is called before ``fit``."""


class InvalidParameterError(InputTypeError):
    """An estimator parameter has the wrong type or value (raised by ``fit`` / ``plan`` before
    anything is read). Both a ``ValueError`` and a ``TypeError``, as scikit-learn's is."""


class IllConditionedWarning(UserWarning):
    """Kept components are too small for a solver that squares the data; use ``solver='tsqr'``."""


class ConvergenceWarning(UserWarning):
    """An iterative solver stopped at its iteration (or pass) budget before reaching ``tol``."""


class AccuracyWarning(UserWarning):
    """An approximate solver's answer carries an error bound larger than asked for (or was not
    asked for at all): the bound is in ``error_bound_`` and ``solver_info_``."""


class CheckpointWarning(UserWarning):
    """A checkpoint was not resumed: it belongs to another job, or the input changed since it
    was written (the job starts afresh and overwrites it)."""


class ChunkLayoutWarning(UserWarning):
    """Labeled input chunked along a feature dimension other than the first: flattening the
    feature dims into matrix columns makes dask regroup the chunks (memory, not extra reads)."""


class OutputExistsError(FileExistsError):
    """Raised instead of overwriting an existing output."""


class StoreChangedError(OutputExistsError):
    """Raised instead of replacing a store that another writer replaced after it was read: a
    loaded model saved back to where it came from would silently drop their update."""


class OutputClaimedError(FileExistsError):
    """Raised when another job holds the claim on an output (or published it first): two writers
    of one target never both succeed. The message names the other job (pid, host, start time)
    and, for a stale claim left by a killed job, the flag that clears it."""


class DamagedStoreError(InputError):
    """Raised when a complete-looking store fails its recorded checksums or shapes (a chunk file
    deleted, values edited, a partial copy that kept its completion marker)."""


class DamagedModelError(DamagedStoreError):
    """Raised by ``load`` for a saved model whose arrays, attributes or fitted invariants
    (orthonormal components, sorted non-negative variances, one k everywhere) are damaged."""


class NonFiniteInputError(InputError):
    """The data holds NaN/±inf where the analysis needs finite values (the message names the
    first such entry; labeled fits name it by coordinates)."""


class DataRangeError(InputError):
    """Raised when finite data overflows float64 arithmetic (|x| so large that squares are inf)."""


class IncompleteStoreError(OSError):
    """Raised when a store has no completion marker (its writer died or is still writing)."""


class StoreReplacedError(IncompleteStoreError):
    """Raised by a lazy reader (``daskpca.io.open_xarray``) when the version it opened was
    replaced or deleted before it finished reading: it never returns chunks of two versions."""


class NewerFormatError(InputError):
    """Raised for a store written in a newer format than this daskpca reads."""


def caller_stacklevel() -> int:
    """``stacklevel`` for ``warnings.warn`` that points at the first frame outside daskpca (the
    user's call), however deep inside the package the warning is raised."""
    import os
    import sys

    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep):
        frame, level = frame.f_back, level + 1
    return level


__all__ = [
    "AccuracyWarning",
    "ChunkLayoutWarning",
    "ConvergenceWarning",
    "DamagedModelError",
    "DamagedStoreError",
    "DataRangeError",
    "IllConditionedWarning",
    "IncompleteStoreError",
    "InputError",
    "InputTypeError",
    "InvalidParameterError",
    "NewerFormatError",
    "NonFiniteInputError",
    "NotFittedError",
    "OutputClaimedError",
    "OutputExistsError",
    "StoreChangedError",
]


class ScratchError(InputError):
    """The scratch folder (``$DASKPCA_SCRATCH``, or the system's temporary directory) cannot hold
    a temporary copy: missing, not a folder, not writable, or full. The message names the folder,
    the variable and the fix."""


class CacheWarning(UserWarning):
    """The pass cache chosen (or asked for) could not be made — no room, an unwritable or full
    scratch folder — and the fit read its source on every pass instead. Said once per fit."""


class ScratchDamagedError(ScratchError):
    """A temporary copy under the scratch folder (a disk pass cache's chunk file, a tile of the
    Gram road's strip copy) is missing, shorter or other than its writer recorded when a later
    pass reads it: something else removed or changed it while the job ran (a temporary-file
    cleaner, another process using the same folder). Never read as the fill value; the message
    names the file, what was expected and the fix (a ``$DASKPCA_SCRATCH`` of the job's own)."""

"""Writing results to zarr without ever leaving a half-written store behind, and reading them back.

**One writer per output.** Every writer claims its target first (:mod:`daskpca.store.claims`: an
exclusive create of ``.NAME.daskpca-claim`` beside it), so of several jobs writing one target
exactly one succeeds and the others fail at once with
:class:`~daskpca.exceptions.OutputClaimedError` naming the holder. The command line claims all of
a job's outputs before it reads any data (:func:`claims`).

**Atomic publish.** A store is written completely elsewhere and then made visible in one step
(:mod:`daskpca.store.publish`): local folders by an atomic exchange of two folders; object stores
(``s3://``, any fsspec URL) as a new version under ``TARGET/versions/`` and a conditional switch of
the pointer object ``TARGET/.daskpca-pointer``. A writer killed at any step leaves the previous
complete store readable. Replaced model stores are kept as history (:func:`history`,
:func:`rollback`). An existing store is only replaced when the caller says ``overwrite=True``;
the check happens before anything is computed and again at the switch.

**Verified reads.** Every store carries a completion marker (``.daskpca-complete``, written last:
format, version, and a record of every object's name and checksum, :mod:`daskpca.store.integrity`).
Readers here (:func:`read_dataset`, :func:`open_xarray`) refuse a store without one, and one whose
objects differ from the record (:class:`~daskpca.exceptions.DamagedStoreError`). Readers of a
versioned object store must go through :func:`resolve` (these functions do).

**Paths as meant.** Every function here takes a path as the user typed it and acts on
:func:`daskpca.store.paths.as_meant` of it (``~`` expanded, ``file://`` / ``FILE://localhost/``
URLs as local paths, relative paths absolute; object-store URLs kept): the claim, the writer,
the publisher and the marker all see one path. It is resolved once, where it enters: the
:class:`~daskpca.store.paths.MeantPath` that gives (the command line's declared paths are ones)
is passed on as it is, and not resolved again by the functions it reaches.

**Datasets.** :func:`write_dataset` / :func:`read_dataset` store small in-memory datasets with a
marker naming their format; what a saved model's bytes mean is the estimator layer's business
(:mod:`daskpca.models._format`, above this module).
"""

from __future__ import annotations

import contextvars
import json
import os
from contextlib import ExitStack, contextmanager

from .store import claims as _claims, integrity as _integrity, publish as _publish
from .store.paths import is_url as _is_url
from .store.paths import local_path as _local
from .store.paths import NETCDF_SUFFIXES, is_netcdf  # noqa: F401  (io's face: the sources it opens)
from .store.paths import MeantPath, as_meant
from .store.paths import check_folder as _check_folder
from .store.paths import overlaps  # noqa: F401  (public here: a job's inputs against its outputs)
from .store.publish import COMPLETE_MARKER, history, resolve, rollback  # noqa: F401  (public here)
from .exceptions import DamagedStoreError, IncompleteStoreError, InputError, NewerFormatError, OutputExistsError

#: Format of stores this version writes and the newest it reads.
FORMAT_VERSION = 1
MODEL_FORMAT = "daskpca-model"
DATA_FORMAT = "daskpca-data"
FOLDER_FORMAT = "daskpca-folder"
#: Previous versions a model store keeps when it is replaced (``update``, ``fit --overwrite``).
MODEL_HISTORY = 5


def _meant(path):
    """``path`` as meant (:func:`~daskpca.store.paths.as_meant`), unless it already is one (a
    :class:`~daskpca.store.paths.MeantPath`): a path is resolved once, where it enters."""
    return path if isinstance(path, MeantPath) else as_meant(path)


def claims(targets, *, break_stale: bool = False, command: str | None = None):
    """Claim every target for the block (:func:`daskpca.store.claims.holding`), paths as meant;
    each target's folder is checked before its claim is taken (a :class:`PermissionError`)."""
    return _claims.holding([_meant(t) for t in targets], break_stale=break_stale, command=command)


def break_claim(target) -> dict | None:
    """Clear the claim on ``target`` (:func:`daskpca.store.claims.break_claim`), path as meant."""
    return _claims.break_claim(_meant(target))

#: The claim this process holds on an output (the command line's rollback publishes under it).
held_claim = _claims.held


def check_writable(path, *, overwrite: bool = False) -> None:
    """Raise before any heavy work when ``path`` (local or fsspec URL) cannot be written:
    :class:`OutputExistsError` when it exists and may not be replaced, :class:`PermissionError`
    when its folder cannot be written. The writers check again."""
    path = _meant(path)
    if _is_url(path):
        from .store import objects as _objects

        fs, root = _objects.filesystem(path)
        fs.invalidate_cache(root)
        with _objects.answering(os.fspath(path)):
            exists = fs.exists(root)
    else:
        exists = _local(path).exists()
        _check_folder(path)
    if exists and not overwrite:
        raise OutputExistsError(_publish._exists_message(os.fspath(path)))
    if exists:
        _publish.check_replaceable(path)


def check_folder(path) -> None:
    """Raise :class:`PermissionError` when a local ``path``'s folder cannot be written (or is a
    file); object-store URLs pass (their permissions show at the first write). Taking a claim
    checks it too (:func:`claims`), before it makes any folder."""
    _check_folder(_meant(path))


@contextmanager
def atomic_directory(path, *, overwrite: bool = False):
    """Yield a temporary local folder that becomes ``path`` only if the block completes: claimed
    and published atomically as in :func:`atomic_store` (e.g. a report), with a marker of format
    ``daskpca-folder`` and no checksum record, so that ``overwrite`` knows it is daskpca's."""
    from pathlib import Path

    with atomic_store(path, overwrite=overwrite, marker={"format": FOLDER_FORMAT}, record=False) as temporary:
        yield Path(temporary)


#: The transaction (:func:`transaction`) publications are deferred to, if any.
_TRANSACTION = contextvars.ContextVar("daskpca_io_transaction", default=None)


@contextmanager
def transaction():
    """Publish every store written in the block together at its end, or none if it fails.

    ``with io.transaction(): pca.save(model); write_array(scores, path)`` — a failed scores write
    leaves no model behind (the command line writes a fit's model and scores like this).
    """
    pending: list = []
    with ExitStack() as stack:
        token = _TRANSACTION.set((pending, stack))
        try:
            yield
        except BaseException:
            for publication, _ in pending:
                publication.abort()
            raise
        finally:
            _TRANSACTION.reset(token)
        try:
            for i, (publication, marker) in enumerate(pending):
                publication.commit(marker)
        except BaseException:
            for publication, _ in pending[i:]:
                publication.abort()
            raise


@contextmanager
def atomic_store(path, *, overwrite: bool = False, marker: dict | None, keep_history: int = 0,
                 record: bool = True, replaces_version: str | None = None):
    """Yield a temporary store location (a :class:`~daskpca.store.paths.MeantPath`: a ``str``
    that says whether it is remote) that becomes ``path`` only if the block completes.

    The target is claimed for the block (unless the caller holds its claim; either way its
    folder was checked when the claim was taken: :func:`daskpca.store.claims.holding`), written at the
    yielded location, recorded (:func:`daskpca.store.integrity.store_record`) and published
    (:mod:`daskpca.store.publish`) with ``marker`` (``None``: a plain folder without one) — at the end of the enclosing :func:`transaction`
    if there is one. ``replaces_version``: the version the caller read from ``path``; if the
    store there is another one now, :class:`StoreChangedError` (checked under the claim, so no
    daskpca writer can slip in between: a compare-and-swap).
    """
    path = _meant(path)
    active = _TRANSACTION.get()
    with ExitStack() as local:
        stack = active[1] if active else local
        claim = stack.enter_context(_claims.claimed(os.fspath(path)))
        if replaces_version is not None:
            _check_unchanged(path, replaces_version)
        publication = _publish.start(path, overwrite=overwrite, keep_history=keep_history, claim=claim)
        try:
            yield publication.location
            full = None if marker is None else {**_marker_fields(), **marker}
            if full is not None and record:
                full["integrity"] = _integrity.store_record(publication.location)
        except BaseException:
            publication.abort()
            raise
        if active:
            active[0].append((publication, full))
            return
        try:
            publication.commit(full)
        except BaseException:
            publication.abort()
            raise


def store_version(path) -> str | None:
    """The version id of the complete store at ``path`` (None where there is none)."""
    try:
        return read_marker(path).get("version")
    except (FileNotFoundError, IncompleteStoreError):
        return None


def _check_unchanged(path, version: str) -> None:
    from .exceptions import StoreChangedError

    current = store_version(path)
    if current != version:
        now = "no longer exists" if current is None else f"now holds version {current}"
        raise StoreChangedError(
            f"{os.fspath(path)!r} was replaced after this model was loaded from it (version {version}; it {now}): "
            "saving would silently drop that update. Load it again, re-apply your change and save, or save "
            "to another path."
        )


def write_array(array, path, *, overwrite: bool = False, name: str | None = None) -> str:
    """Write a (lazy) array to a zarr v3 store at ``path``, atomically.

    Parameters
    ----------
    array : dask.array.Array or ndarray
        Computed block by block and streamed to disk; it is never held whole.
    path : str or os.PathLike
    overwrite : bool
    name : str, optional
        Written as the array's ``long_name`` attribute.

    Returns
    -------
    str
        The path written (as meant: absolute, ``~`` expanded).
    """
    import dask.array as da

    path = _meant(path)
    if not isinstance(array, da.Array):
        array = da.from_array(array)
    # zarr needs regular chunks (all equal but the last): regroup irregular ones.
    array = array.rechunk(tuple(max(c) if c else 1 for c in array.chunks))
    with atomic_store(path, overwrite=overwrite, marker={"format": DATA_FORMAT}) as temporary:
        array.to_zarr(temporary, zarr_format=3, compute=True)
        if name is not None:
            import zarr

            zarr.open_array(temporary, mode="r+").attrs["long_name"] = name
    return os.fspath(path)


# ------------------------------------------------------------------------------ store locations


def _marker_fields() -> dict:
    from ._version import __version__

    return {"format_version": FORMAT_VERSION, "daskpca_version": __version__}


def read_marker(path) -> dict:
    """The completion marker of a store (of its current version); raise when the store is
    missing, partial or too new."""
    path = _meant(path)
    location = resolve(path)
    if _is_url(location):
        from .store import objects as _objects

        fs, root = _objects.filesystem(location)
        raw, _ = _objects.read(fs, f"{root}/{COMPLETE_MARKER}")
        fs.invalidate_cache(root)
        with _objects.answering(location):
            exists = raw is not None or fs.exists(root)
    else:
        local = _local(location)
        exists = local.exists()
        raw = (local / COMPLETE_MARKER).read_bytes() if (local / COMPLETE_MARKER).is_file() else None
    if not exists:
        raise FileNotFoundError(f"no store at {os.fspath(path)!r}.")
    if raw is None:
        raise IncompleteStoreError(
            f"{os.fspath(path)!r} has no completion marker ({COMPLETE_MARKER}): either daskpca "
            "did not write it (e.g. an input data store where a model or results store is expected), "
            "or its writer died or is still running. Refusing to read it."
        )
    try:
        marker = json.loads(raw)
        version = int(marker.get("format_version", 0))
    except (ValueError, TypeError, AttributeError):
        raise IncompleteStoreError(f"{os.fspath(path)!r} has an unreadable completion marker; write it again.") from None
    if version > FORMAT_VERSION:
        raise NewerFormatError(
            f"{os.fspath(path)!r} was written in daskpca store format {version} (by daskpca "
            f"{marker.get('daskpca_version', '?')}); this daskpca reads format {FORMAT_VERSION} "
            "and older. Upgrade daskpca to read it."
        )
    return marker


def verify(path, *, full: bool = True, label: str | None = None, error=None) -> dict:
    """Check a store against the record in its marker; return the marker.

    ``full=True`` re-reads every object and compares checksums; ``False`` only lists names (a
    cheap check for missing or extra chunk files). Raises
    :class:`~daskpca.exceptions.DamagedStoreError` (or ``error``) naming the damage.
    """
    path = _meant(path)
    marker = read_marker(path)
    # Every store daskpca publishes carries a record except a plain folder (a report): a record
    # missing from any other is damage, never a reason to skip the check.
    if marker.get("format") != FOLDER_FORMAT:
        kwargs = {"error": error} if error is not None else {}
        _integrity.check_store(resolve(path), marker.get("integrity"), full=full,
                               label=label or repr(os.fspath(path)), **kwargs)
    return marker


# ------------------------------------------------------------------------------ labeled data


def write_xarray(obj, path, *, overwrite: bool = False, chunks: dict | None = None) -> str:
    """Write a (lazy) DataArray / Dataset — scores, reconstructions, maps — to zarr, atomically.

    Dask-backed data is computed block by block and streamed to the store (never held whole);
    chunks follow the data's (e.g. the input's rows along the sample dims), made regular for zarr,
    or ``chunks`` (``{dim: size}``) when given. Read it back with :func:`open_xarray`.
    """
    import xarray as xr

    path = _meant(path)
    ds = obj.to_dataset(name=obj.name or "data") if isinstance(obj, xr.DataArray) else obj
    ds = ds.copy(deep=False)
    if chunks:
        ds = ds.chunk(chunks)
    regular = {}
    for dim, sizes in (ds.chunksizes or {}).items():
        if len(set(sizes[:-1])) > 1 or (len(sizes) > 1 and sizes[-1] > sizes[0]):
            regular[dim] = max(sizes)
    if regular:
        ds = ds.chunk(regular)
    for variable in ds.variables.values():
        variable.encoding = {}
    with atomic_store(path, overwrite=overwrite, marker={"format": DATA_FORMAT}) as temporary:
        ds.to_zarr(temporary, mode="w", zarr_format=3, consolidated=False, compute=True)
    return os.fspath(path)


def open_xarray(path, **kwargs):
    """Lazily open a store written by :func:`write_xarray` (refuses partial stores and stores
    with missing or extra chunk files; :func:`verify` checks every byte).

    Every chunk comes from the version current at this call, also while other jobs replace the
    store, or the read raises :class:`~daskpca.exceptions.StoreReplacedError` (a version deleted
    meanwhile): never a mix (:mod:`daskpca.store.snapshot`).
    """
    import xarray as xr

    from .store.snapshot import open_version

    path = _meant(path)
    read_marker(path)  # missing, partial or too new: named by the path given
    store = open_version(path)
    store.version = verify(store.location, full=False, label=repr(os.fspath(path))).get("version")
    with _quiet_marker():
        return xr.open_zarr(store, consolidated=False, **kwargs)


@contextmanager
def _quiet_marker():
    """zarr warns about the (non-zarr) completion marker file when it lists a group: expected."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=f".*{COMPLETE_MARKER}.*not recognized")
        yield


# ------------------------------------------------------------------------------ sources

def open_source(path, var: str | None = None, *, var_name: str = "var"):
    """Open a data source lazily, as the command line does: nothing is read but metadata.

    Parameters
    ----------
    path : str or os.PathLike
        A zarr array or group (local path or fsspec URL; a store daskpca published to an object
        store is read at its current version), or a NetCDF file (:func:`is_netcdf`). As meant:
        ``~`` and ``file://`` as in every function here.
    var : str, optional
        The variable of a group or NetCDF file; needed when it holds several.
    var_name : str
        What ``var`` is called in errors (the command line's second field passes ``"var2"``).

    Returns
    -------
    dask.array.Array or xarray.DataArray
        A zarr array as a dask array of its chunks; a variable of a group or NetCDF file as a
        lazy (dask-backed) DataArray, ready for ``fit(data, sample_dims=...)``.

    Raises
    ------
    InputError
        Nothing at ``path``; neither zarr nor readable NetCDF; ``var`` unknown (its variables
        listed), missing where there are several, or given for a single array; a variable that
        is not numeric.
    """
    import dask.array as da
    import numpy as np
    import xarray as xr
    import zarr

    path = _meant(path)
    remote = _is_url(path)
    if not remote and not os.path.exists(path):
        raise InputError(f"{path!r} does not exist; give the path or URL of a zarr store or NetCDF file.")
    if is_netcdf(path):
        try:
            data = xr.open_dataset(path, chunks={})
        except Exception as exc:  # the engine's own message says what is missing
            raise InputError(f"cannot open {path!r} as NetCDF: {exc}") from exc
        array, label = _variable(data, var, path, var_name)
    else:
        # What daskpca publishes to an object store is a pointer to its current version: read
        # that version, as every reader of the store layer does (a local store is read where it is).
        location = resolve(path) if remote else path
        try:
            node = zarr.open(location, mode="r")
        except Exception as exc:
            raise InputError(f"{path!r} is not a zarr store or a NetCDF file ({type(exc).__name__}: {exc}).") from exc
        if isinstance(node, zarr.Array):
            if var:
                raise InputError(f"{path!r} is a single zarr array; {var_name}={var!r} applies to datasets only: drop it.")
            array, label = da.from_zarr(node), path
        else:
            # Consolidated metadata is not part of zarr v3: do not look for it there (xarray warns).
            consolidated = False if node.metadata.zarr_format == 3 else None
            array, label = _variable(xr.open_zarr(location, consolidated=consolidated, chunks={}), var, path, var_name)
    # Every kind of source ends here: one check that PCA is given numbers.
    if np.dtype(array.dtype).kind not in "biuf":
        raise InputError(f"{label} has dtype {array.dtype}; PCA needs numbers. Choose a numeric variable "
                         f"({var_name}='NAME').")
    return array


def _variable(data, var, path, var_name):
    """``(variable, label)``: the variable ``var`` of a dataset (the only one when ``var`` is None)."""
    names = sorted(str(name) for name in data.data_vars)
    if var is None:
        if len(names) != 1:
            raise InputError(f"{path!r} holds variables {names}; choose one with {var_name}='NAME'.")
        var = names[0]
    if var not in data.data_vars:
        raise InputError(f"{var_name}={var!r} is not in {path!r}; its variables are {names}.")
    return data[var], f"{path}:{var}"


# ------------------------------------------------------------------------------ datasets


def write_dataset(ds, path, *, overwrite: bool = False, marker: dict, keep_history: int = 0,
                  replaces_version: str | None = None) -> str:
    """Write a small in-memory ``xarray.Dataset`` (e.g. a saved model) to zarr, atomically
    (``replaces_version``: see :func:`atomic_store`)."""
    path = _meant(path)
    ds = ds.copy(deep=False)
    for variable in ds.variables.values():
        variable.encoding = {}
    with atomic_store(path, overwrite=overwrite, marker=marker, keep_history=keep_history,
                      replaces_version=replaces_version) as temporary:
        if not temporary.remote:  # the publication's location (a MeantPath) knows
            ds.to_zarr(temporary, mode="w", zarr_format=3, consolidated=False)
            return os.fspath(path)
        # zarr creates an object store's arrays one request after another; a small dataset is
        # written locally and uploaded in one concurrent batch instead (measured 5x faster on S3).
        import tempfile

        from .store import objects as _objects

        with tempfile.TemporaryDirectory(prefix="daskpca-") as local:
            ds.to_zarr(local, mode="w", zarr_format=3, consolidated=False)
            fs, remote = _objects.filesystem(temporary)
            with _objects.answering(os.fspath(path)):
                fs.put(local + "/", remote + "/", recursive=True)
    return os.fspath(path)


#: Reads of a local store retried when a concurrent publish replaced it mid-read.
LOCAL_READ_ATTEMPTS = 5


def read_dataset(path, *, expected_format: str, error=None, verify_integrity: bool = True):
    """Read a complete store of ``expected_format`` (e.g. a saved model) into memory, after
    checking every object against its record (:func:`verify`) — all of one version, also while
    other jobs publish new ones.

    Raises
    ------
    FileNotFoundError, IncompleteStoreError, NewerFormatError
        See :func:`read_marker`.
    DamagedStoreError (or ``error``)
        When objects are missing or differ from what was written.
    ValueError
        When the store holds another kind of daskpca store.
    """
    path = _meant(path)
    for attempt in range(LOCAL_READ_ATTEMPTS):
        marker = read_marker(path)
        if marker.get("format") != expected_format:
            raise InputError(
                f"{os.fspath(path)!r} is a daskpca {marker.get('format')!r} store, not a {expected_format!r} store"
                + (" (a results store: pass the MODEL written by `daskpca fit --out`)." if marker.get("format") == DATA_FORMAT else ".")
            )
        location = resolve(path)
        if _is_url(location):
            break
        # A local folder is replaced whole by a concurrent publish (one rename). The folder is
        # pinned by a directory descriptor, so the marker, the checksums and the data all come
        # from one version even if it is moved to the history meanwhile; only a version deleted
        # mid-read (the history full) fails, and is read again — the new one.
        try:
            with _pinned_folder(location) as pinned:
                pinned_marker = (verify(pinned, full=True, label=repr(os.fspath(path)), error=error)
                                 if verify_integrity else read_marker(pinned))
                ds = _load_dataset(pinned, path, error)
        except (DamagedStoreError, IncompleteStoreError, FileNotFoundError):
            if store_version(path) == marker.get("version") or attempt == LOCAL_READ_ATTEMPTS - 1:
                raise
            continue
        if pinned_marker.get("format") == expected_format:
            return ds
    else:
        raise IncompleteStoreError(f"{os.fspath(path)!r} was replaced {LOCAL_READ_ATTEMPTS} times while it was "
                                   "read; read it when its writers are done.")
    # An object store: one concurrent download, then the bytes checked are the bytes read.
    import tempfile

    from .store import objects as _objects

    with tempfile.TemporaryDirectory(prefix="daskpca-") as local:
        fs, remote = _objects.filesystem(location)
        with _objects.answering(location):
            fs.get(remote + "/", local + "/", recursive=True)
        if marker.get("format") != FOLDER_FORMAT and verify_integrity:
            _integrity.check_store(local, marker.get("integrity"), full=True, label=repr(os.fspath(path)),
                                   **({"error": error} if error is not None else {}))
        return _load_dataset(local, path, error)


@contextmanager
def _pinned_folder(location: str):
    """A path to the folder ``location`` names *now* that keeps naming it if it is renamed
    (``/proc/self/fd/N`` of an open directory descriptor, on Linux); ``location`` elsewhere."""
    try:
        fd = os.open(location, os.O_RDONLY | os.O_DIRECTORY)
    except (OSError, AttributeError):
        yield location
        return
    try:
        pinned = f"/proc/self/fd/{fd}"
        yield pinned if os.path.isdir(pinned) else location
    finally:
        os.close(fd)


def _load_dataset(location, path, error):
    import xarray as xr

    try:
        with _quiet_marker(), xr.open_zarr(location, consolidated=False) as stored:
            return stored.load()
    except (ValueError, KeyError, TypeError) as exc:  # arrays that do not fit together
        raise (error or DamagedStoreError)(
            f"{os.fspath(path)!r} cannot be read as a dataset ({type(exc).__name__}: {str(exc).splitlines()[0]}); "
            "it was changed after daskpca wrote it. Restore a complete copy or write it again.") from None

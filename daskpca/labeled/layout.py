"""Dims → matrix and back: how labeled data maps onto the (n_samples, n_features) matrix.

``sample_dims`` (one name or several) become the rows; every other dimension of every data
variable is a feature dimension. Each variable is transposed to ``(*sample_dims, *feature_dims)``
and reshaped lazily to ``(n_samples, d_v)``; the variables of a ``Dataset`` are concatenated along
the features (one multivariate analysis). Rows are ordered as NumPy's C order over
``sample_dims``. :class:`Layout` remembers all of it, checks that later input has the same
variables, dims, sizes and coords, turns result rows back into labeled arrays, and is saved with
the model as JSON (:meth:`Layout.to_json`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Hashable

import numpy as np

from .._validation import Positions, as_dask_matrix
from ..passes import geometry_of, regroup, remember
from ..exceptions import ChunkLayoutWarning, InputError, InputTypeError, caller_stacklevel

#: Name of the dimension that indexes components (modes), numbered from 1.
MODE = "mode"
#: Key used for an unnamed DataArray inside the internal Dataset.
_UNNAMED = "__daskpca_unnamed__"


def is_labeled(X) -> bool:
    """Whether ``X`` is an xarray ``DataArray`` or ``Dataset`` (without importing xarray)."""
    return type(X).__module__.startswith("xarray.") and hasattr(X, "dims")


@dataclass(frozen=True)
class VariableLayout:
    """Where one variable's features sit among the matrix columns."""

    name: Hashable
    dims: tuple  # feature dims, in the order they are flattened
    shape: tuple
    start: int

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def stop(self) -> int:
        return self.start + self.size


@dataclass
class Layout:
    """How labeled data maps onto the (n_samples, n_features) matrix, and back."""

    sample_dims: tuple
    variables: list
    is_dataarray: bool
    name: Hashable  # the DataArray's name (None when unnamed)
    coords: object  # xarray.Coordinates over feature dims only
    attrs: dict = field(default_factory=dict)  # per variable attrs (JSON-able subset)
    #: ``{"kind": "M" (int64 ns) or "f", "spans": [[first, last], ...]}``: the first sample dim's
    #: coordinate range of each fit and update, so an update can refuse samples the model holds.
    sample_spans: dict = field(default_factory=dict)

    @property
    def n_features(self) -> int:
        return self.variables[-1].stop if self.variables else 0

    # ---- building

    @classmethod
    def from_dataset(cls, ds, sample_dims: tuple, is_dataarray: bool, name) -> "Layout":
        _check_sample_dims(ds, sample_dims, is_dataarray)
        if MODE in ds.dims:
            raise InputError(
                f"X has a dimension named {MODE!r}, which daskpca uses for the components; "
                f"rename it first, e.g. X.rename({{{MODE!r}: 'mode_in'}})."
            )
        variables, start = [], 0
        for var_name, var in ds.data_vars.items():
            dims = tuple(d for d in var.dims if d not in sample_dims)
            shape = tuple(var.sizes[d] for d in dims)
            layout = VariableLayout(var_name, dims, shape, start)
            variables.append(layout)
            start = layout.stop
        feature_dims = {d for v in variables for d in v.dims}
        coords = ds.coords.to_dataset().drop_vars(
            [k for k, c in ds.coords.items() if set(c.dims) - feature_dims]
        ).coords
        attrs = {str(v.name): _jsonable_attrs(ds[v.name].attrs) for v in variables}
        return cls(tuple(sample_dims), variables, is_dataarray, name, coords, attrs)._with_samples(ds)

    # ---- which samples the model holds

    def _stamps(self, data):
        """``(kind, values)`` of the first sample dim's 1-D numeric or time coordinate, or None."""
        dim = self.sample_dims[0]
        if dim not in data.coords or data.coords[dim].ndim != 1 or data.coords[dim].size == 0:
            return None
        values = np.asarray(data.coords[dim].values)
        if values.dtype.kind == "M":
            return "M", values.astype("datetime64[ns]").astype(np.int64)
        if values.dtype.kind in "iuf":
            return "f", values.astype(np.float64)
        return None

    def _with_samples(self, data) -> "Layout":
        """This layout, also holding the span of ``data``'s samples (fit, update)."""
        stamps = self._stamps(data)
        if stamps is None or (self.sample_spans and self.sample_spans["kind"] != stamps[0]):
            return replace(self, sample_spans={})  # samples without comparable stamps: spans unknown
        kind, values = stamps
        span = [int(values.min()), int(values.max())] if kind == "M" else [float(values.min()), float(values.max())]
        return replace(self, sample_spans={"kind": kind, "spans": [*self.sample_spans.get("spans", []), span]})

    def with_new_samples(self, data) -> "Layout":
        """The layout after an update with ``data``, refusing samples whose stamps the model holds.

        Raises
        ------
        InputError
            Naming the first stamps of ``data`` that lie within a span of samples already folded
            in (the same time steps twice would double their weight in the covariance).
        """
        stamps = self._stamps(data)
        if stamps is not None and self.sample_spans and stamps[0] == self.sample_spans["kind"]:
            kind, values = stamps
            held = np.zeros(values.shape, dtype=bool)
            for first, last in self.sample_spans["spans"]:
                held |= (values >= first) & (values <= last)
            if held.any():
                shown = values[held][:3]
                names = [str(np.datetime64(int(v), "ns")) for v in shown] if kind == "M" else [f"{v:g}" for v in shown]
                spans = "; ".join((f"{np.datetime64(int(a), 'ns')} … {np.datetime64(int(b), 'ns')}" if kind == "M"
                                   else f"{a:g} … {b:g}") for a, b in self.sample_spans["spans"])
                raise InputError(
                    f"{int(held.sum())} of the {values.size} new samples have {self.sample_dims[0]!r} stamps the model "
                    f"already holds ({', '.join(names)}{', …' if held.sum() > 3 else ''}; it holds {spans}): folding "
                    "them in again would count them twice. Pass only samples after those the model was fitted and "
                    "updated on, or refit on the whole series.")
        return self._with_samples(data)

    # ---- saved with the model

    def to_json(self) -> dict:
        """The layout as JSON (coords are saved as arrays beside it; only their names here)."""
        return {
            "sample_dims": [str(d) for d in self.sample_dims],
            "is_dataarray": self.is_dataarray,
            "name": self.name,
            "variables": [{"name": v.name, "dims": list(v.dims), "shape": list(v.shape)} for v in self.variables],
            "attrs": self.attrs,
            "coords": sorted(str(k) for k in self.coords),
            "sample_spans": self.sample_spans,
            # A store decodes times as datetime64[ns]: record each time coordinate's own unit.
            "coord_dtypes": {str(k): str(c.dtype) for k, c in self.coords.items() if c.dtype.kind in "mM"},
        }

    @classmethod
    def from_json(cls, info: dict, coords_source) -> "Layout":
        """Inverse of :meth:`to_json`; ``coords_source`` holds the coords named there."""
        import xarray as xr

        variables, start = [], 0
        for v in info["variables"]:
            layout = VariableLayout(v["name"], tuple(v["dims"]), tuple(v["shape"]), start)
            variables.append(layout)
            start = layout.stop
        dtypes = info.get("coord_dtypes", {})
        coords = xr.Dataset(coords={k: _with_dtype(coords_source.coords[k].variable, dtypes.get(k)) for k in info["coords"]}).coords
        return cls(tuple(info["sample_dims"]), variables, info["is_dataarray"], info["name"], coords, info["attrs"],
                   info.get("sample_spans", {}))

    # ---- dims → matrix

    def to_matrix(self, ds, *, check: bool = False):
        """``(dask_matrix, kind)`` of shape (n_samples, n_features); no data is read."""
        import dask.array as da

        _check_sample_dims(ds, self.sample_dims, self.is_dataarray)
        if check:
            self.check_matches(ds)
        n_samples = int(np.prod([ds.sizes[d] for d in self.sample_dims], dtype=np.int64))
        pieces, lazy, geometry = [], False, None
        for v in self.variables:
            var = ds[v.name]
            data = var.data
            if isinstance(data, da.Array):
                # Tasks of whole storage chunks, grouped along the first sample dim (before the
                # transpose, so a stored variable is re-read in larger selections).
                axes = [var.dims.index(d) for d in self.sample_dims]
                data = regroup(data, axes[0], tuple(axes[1:]), encoding=var.encoding)
                geometry = geometry or geometry_of(data)
                var = var.copy(data=data)
            data = var.transpose(*self.sample_dims, *v.dims).data
            lazy = lazy or isinstance(data, da.Array)
            if isinstance(data, da.Array):
                _warn_if_reshape_regroups(v.name, (*self.sample_dims, *v.dims), data, len(self.sample_dims))
            pieces.append(data.reshape(n_samples, v.size))
        if lazy:
            matrix = da.concatenate([da.asarray(p) for p in pieces], axis=1) if len(pieces) > 1 else da.asarray(pieces[0])
        else:
            matrix = np.concatenate(pieces, axis=1) if len(pieces) > 1 else pieces[0]
        matrix, kind = as_dask_matrix(matrix)
        return (remember(matrix, geometry) if geometry is not None else matrix), kind

    def check_matches(self, ds) -> None:
        """Raise when ``ds`` does not have the fitted variables, feature dims, sizes and coords."""
        fitted = [v.name for v in self.variables]
        missing = [n for n in fitted if n not in ds.data_vars]
        if missing:
            raise InputError(
                f"X lacks the variable(s) {missing} the model was fitted on (it has "
                f"{list(ds.data_vars)}). Pass the same variables as at fit time."
            )
        extra = [n for n in ds.data_vars if n not in fitted]
        if extra:
            raise InputError(
                f"X has variable(s) {extra} the model was not fitted on; select the fitted ones: "
                f"X[{fitted}]."
            )
        for v in self.variables:
            var = ds[v.name]
            dims = tuple(d for d in var.dims if d not in self.sample_dims)
            if set(dims) != set(v.dims):
                raise InputError(
                    f"{_label(v.name)} has feature dims {dims} here but {v.dims} at fit "
                    "time; the feature dimensions must be the same (their order may differ)."
                )
            for dim, size in zip(v.dims, v.shape):
                if var.sizes[dim] != size:
                    raise InputError(
                        f"dimension {dim!r} of {_label(v.name)} has size {var.sizes[dim]} here but "
                        f"{size} at fit time; the model takes data on the feature grid it was fitted on."
                    )
                if dim in self.coords and dim in ds.coords:
                    _check_same_coord(dim, self.coords[dim].values, ds.coords[dim].values)

    # ---- matrix → dims

    def sample_coords(self, source):
        """Coords of ``source`` that live on sample dims only."""
        return {
            k: c.variable for k, c in source.coords.items() if c.dims and set(c.dims) <= set(self.sample_dims)
        }

    def unstack_features(self, rows, *, leading_dims: tuple, leading_shape: tuple, leading_coords: dict, attrs_name: str | None = None):
        """Turn an array (m, n_features) — NumPy or dask — into a DataArray / Dataset."""
        import xarray as xr

        out = {}
        for v in self.variables:
            block = rows[:, v.start : v.stop].reshape(*leading_shape, *v.shape)
            coords = {k: c for k, c in self.coords.items() if set(c.dims) <= set(v.dims)}
            coords.update({k: c for k, c in leading_coords.items()})
            out[v.name] = xr.DataArray(
                block, dims=(*leading_dims, *v.dims), coords=coords, attrs=dict(self.attrs.get(str(v.name), {}))
            )
        if self.is_dataarray:
            (array,) = out.values()
            return array.rename(self.name)
        return xr.Dataset(out)


def _with_dtype(variable, dtype):
    """``variable`` cast back to the dtype recorded at save time (e.g. datetime64[us]), attrs kept."""
    if dtype is None or variable.dtype == np.dtype(dtype):
        return variable
    return variable.copy(data=variable.values.astype(dtype))


class LabeledPositions(Positions):
    """Names a (row, column) of the analysed matrix by coordinates, e.g. ``time=2001-03-01,
    lat=10.5, lon=200.0`` (and the variable of a Dataset), for error messages — also inside
    projection tasks, where it is shipped once per graph."""

    def __init__(self, layout: Layout, sample_shape: tuple, sample_values: dict, columns=None):
        super().__init__(columns)
        self.layout = layout
        self.sample_shape = sample_shape
        self.sample_values = sample_values  # sample dim -> its coordinate values (if any)

    @classmethod
    def of(cls, layout: Layout, X, columns=None) -> "LabeledPositions":
        """Positions in ``X`` (labeled like at fit time); ``columns`` maps kept to input columns."""
        ds, _, _ = as_dataset(X)
        dims = layout.sample_dims
        values = {d: ds[d].values for d in dims if d in ds.coords and ds[d].dims == (d,)}
        return cls(layout, tuple(ds.sizes[d] for d in dims), values, columns)

    def describe(self, row: int, col: int) -> str:
        col = self.input_column(col)
        v = next(v for v in self.layout.variables if v.start <= col < v.stop)
        named = [_named(d, i, self.sample_values.get(d)) for d, i in zip(self.layout.sample_dims, np.unravel_index(row, self.sample_shape))]
        for d, i in zip(v.dims, np.unravel_index(col - v.start, v.shape)):
            coord = self.layout.coords[d].values if d in self.layout.coords and self.layout.coords[d].dims == (d,) else None
            named.append(_named(d, i, coord))
        where = ", ".join(named)
        return where if self.layout.is_dataarray else f"{where} of variable {v.name!r}"


def positions_of(layout: Layout | None, X, keep: np.ndarray) -> Positions:
    """How a projection task names a NaN position of ``X``: by coordinates for a labeled model
    (``layout``), else by input row and column; ``keep`` is the feature stage's kept mask."""
    columns = None if keep.all() else np.flatnonzero(keep)
    return Positions(columns) if layout is None else LabeledPositions.of(layout, X, columns)


def _named(dim, index, values) -> str:
    """``dim=value`` (a date as 2001-03-01, a number as Python prints it), or ``dim[index]``."""
    if values is None:
        return f"{dim}[{int(index)}]"
    value = values[int(index)]
    if isinstance(value, np.datetime64):
        day = value.astype("datetime64[D]")
        text = str(day) if day == value else np.datetime_as_string(value, unit="s")
    else:
        text = repr(value.item() if isinstance(value, np.generic) else value)
    return f"{dim}={text.strip(chr(39))}"


def _label(name) -> str:
    return "the DataArray" if name == _UNNAMED else f"variable {name!r}"


def _check_same_coord(dim, fitted, given) -> None:
    fitted, given = np.asarray(fitted), np.asarray(given)
    if fitted.shape != given.shape:
        raise InputError(
            f"coordinate {dim!r} has {given.size} values here but {fitted.size} at fit time."
        )
    if fitted.dtype.kind in "fc" and given.dtype.kind in "fc":
        same = np.isclose(fitted, given, rtol=1e-6, atol=0) | (np.isnan(fitted) & np.isnan(given))
    else:
        same = fitted == given
    if not np.all(same):
        i = int(np.argmin(same))
        here, there = given[i].item() if hasattr(given[i], "item") else given[i], fitted[i].item() if hasattr(fitted[i], "item") else fitted[i]
        raise InputError(
            f"coordinate {dim!r} does not match the one the model was fitted on: at position {i} "
            f"it is {here!r} here but {there!r} at fit time. Select or interpolate the "
            f"data onto the fitted grid (e.g. X.sel({dim}=pca.to_xarray()[{dim!r}])) first."
        )


def check_time_axis(X, dims, what: str) -> None:
    """Raise :class:`~daskpca.exceptions.InputError` unless the coordinate of each of ``dims``
    (numbers or dates; a dim without one counts by position) increases strictly: analyses that
    treat consecutive samples as consecutive times (the Hilbert transform, time-delay lags) give
    a different answer, silently, on a shuffled, repeated or reversed axis. Reads coords only."""
    for dim in dims:
        coord = X.coords.get(dim) if dim in X.dims else None
        if coord is None or coord.ndim != 1 or coord.dtype.kind not in "iufmM" or coord.size < 2:
            continue
        values = np.asarray(coord.values)
        forward = values[1:] > values[:-1]
        if forward.all():
            continue
        sort = f"sort it first: X.sortby({dim!r})"
        if (values[1:] < values[:-1]).all():
            raise InputError(
                f"{what} need {dim!r} to run forward in time, but it runs backwards (from {values[0]} down to "
                f"{values[-1]}); {sort}."
            )
        i = int(np.argmin(forward))
        raise InputError(
            f"{what} need {dim!r} to increase from each sample to the next (consecutive samples are consecutive "
            f"times), but it goes from {values[i]} to {values[i + 1]} at position {i + 1}: the axis is shuffled or "
            f"repeats a value. {sort[0].upper() + sort[1:]} (and drop repeated steps)."
        )


def _check_sample_dims(ds, sample_dims, is_dataarray) -> None:
    missing = [d for d in sample_dims if d not in ds.dims]
    if missing:
        raise InputError(
            f"sample_dims {list(missing)} not found in X; X has dims {list(ds.dims)}. "
            "sample_dims names the dimension(s) that index samples (e.g. 'time')."
        )
    if not ds.data_vars:
        raise InputError("X is a Dataset without data variables: nothing to analyse.")
    lacking = {n: v.dims for n, v in ds.data_vars.items() if not set(sample_dims) <= set(v.dims)}
    if lacking:
        described = ", ".join(f"{n!r} has dims {tuple(d)}" for n, d in lacking.items())
        raise InputError(
            f"every variable of a Dataset must have all sample dims {list(sample_dims)}, but "
            f"{described}. Select the variables to analyse together, e.g. "
            f"X[{[n for n in ds.data_vars if n not in lacking]}]."
        )


def _normalize_sample_dims(sample_dims) -> tuple:
    if sample_dims is None:
        raise InputTypeError(
            "labeled input needs sample_dims: the dimension(s) that index samples, e.g. "
            "pca.fit(X, sample_dims='time') or sample_dims=('time', 'member')."
        )
    if isinstance(sample_dims, str) or not isinstance(sample_dims, (list, tuple)):
        sample_dims = (sample_dims,)
    if len(set(sample_dims)) != len(sample_dims) or not sample_dims:
        raise InputError(f"sample_dims={sample_dims!r} must name one or more distinct dims.")
    return tuple(sample_dims)


def _as_dataset(X):
    """``(dataset, is_dataarray, name)``."""
    import xarray as xr

    if isinstance(X, xr.DataArray):
        name = X.name
        return X.to_dataset(name=_UNNAMED if name is None else name), True, name
    if isinstance(X, xr.Dataset):
        return X, False, None
    raise InputTypeError(f"expected an xarray DataArray or Dataset, got {type(X).__name__}.")


def _jsonable_attrs(attrs: dict) -> dict:
    out = {}
    for k, v in attrs.items():
        if isinstance(v, np.generic):
            v = v.item()
        elif isinstance(v, np.ndarray):
            v = v.tolist()
        try:
            json.dumps(v)
        except TypeError:
            continue
        out[str(k)] = v
    return out


def normalize_sample_dims(sample_dims) -> tuple:
    """``sample_dims`` as a tuple of distinct names (a single name becomes a 1-tuple)."""
    return _normalize_sample_dims(sample_dims)


def as_dataset(X):
    """``(dataset, is_dataarray, name)`` of a DataArray or Dataset."""
    return _as_dataset(X)


def _warn_if_reshape_regroups(name, dims: tuple, data, n_sample_dims: int) -> None:
    """Warn when flattening ``data``'s sample dims and feature dims into rows and columns makes
    dask rechunk it: a group of dims collapses chunk-for-chunk only if every dim after the group's
    first is one chunk. Otherwise each task regroups whole bands of input chunks (e.g. strips of
    longitude into rows of latitude), holding them all at once."""
    import warnings

    groups = ((0, n_sample_dims), (n_sample_dims, len(dims)))
    for start, stop in groups:
        sized = [i for i in range(start, stop) if data.shape[i] > 1]  # length-1 dims change nothing
        split = [i for i in sized[1:] if len(data.chunks[i]) > 1]
        if not split:
            continue
        first = dims[split[0]]
        # An output chunk needs every input chunk of its band: whole later dims of the group.
        band = [data.shape[i] if i in sized[1:] else max(data.chunks[i]) for i in range(len(dims))]
        held = int(np.prod(band, dtype=np.int64)) * data.dtype.itemsize
        lead = dims[sized[0]]
        kind = "sample" if start == 0 else "feature"
        fix = ", ".join(f"{dims[i]!r}: -1" for i in split)
        warnings.warn(
            f"{'the array' if name == _UNNAMED else repr(name)} is chunked along {kind} dimension {first!r} "
            f"(chunks of {max(data.chunks[split[0]])} of {data.shape[split[0]]}), which is not the first of its "
            f"{kind} dims {dims[start:stop]}: flattening them makes dask regroup chunks into bands of whole "
            f"{first!r} rows, about {held / 2**20:.0f} MiB held per task. Chunk the leading {kind} dim "
            f"{lead!r} instead, e.g. .chunk({{{fix}}}).",
            ChunkLayoutWarning, stacklevel=caller_stacklevel(),
        )

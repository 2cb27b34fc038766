"""Per-feature weights of labeled data: ``"coslat"``, arrays, DataArrays, dicts per variable.

The estimator's feature stage (:mod:`daskpca._features`) multiplies each kept feature by its
weight (divided by its standard deviation with ``standardize=True``); this module only turns what
the user passed into one positive float64 per matrix column.
"""

from __future__ import annotations

import numpy as np

from .layout import Layout, VariableLayout, _label
from ..exceptions import InputError

#: Coordinate names searched (case-insensitive) for ``weights="coslat"``.
LATITUDE_NAMES = ("lat", "latitude", "lats", "y", "nav_lat", "rlat", "xlat", "lat_0")
#: ``units`` of a latitude coordinate in radians (CF: "radians"; anything else is degrees).
RADIAN_UNITS = ("radians", "radian", "rad")


def resolve_weights(weights, ds, layout: Layout) -> np.ndarray:
    """One float64 weight per matrix column (n_features,), checked positive and finite.

    ``weights`` may be ``None`` (all 1), ``"coslat"`` (√cos(latitude), clipped at 0, from the
    first coordinate named like a latitude: ``lat``, ``latitude``, ``y``, ... or with
    ``standard_name="latitude"``), a scalar, an array or DataArray broadcastable over the feature
    dims (a NumPy array aligns with the *trailing* feature dims, as NumPy broadcasting does;
    a DataArray aligns by dim name), or a dict ``{variable: any of these}`` for a Dataset
    (variables left out get 1).
    """
    out = np.ones(layout.n_features)
    if weights is None:
        return out
    if isinstance(weights, dict):
        names = [v.name for v in layout.variables]
        unknown = [key for key in weights if key not in names]
        if unknown:  # a misspelt name would silently leave its variable unweighted
            raise InputError(
                f"weights name variable(s) {unknown} that X does not have; its variables are {names}. "
                "Use those names as the dict's keys (variables left out get weight 1)."
            )
    for v in layout.variables:
        spec = weights.get(v.name, None) if isinstance(weights, dict) else weights
        if spec is None:
            continue
        out[v.start : v.stop] = _variable_weights(spec, ds, v, layout).ravel()
    bad = ~np.isfinite(out) | (out <= 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(
            f"weights must be finite and > 0 for every feature; {int(bad.sum())} are not (the "
            f"first, feature {i}, is {out[i]!r}). To leave features out, set the data to NaN "
            "there (masked features are dropped) or select a region."
        )
    return out


def _variable_weights(spec, ds, v: VariableLayout, layout: Layout) -> np.ndarray:
    import xarray as xr

    if isinstance(spec, str):
        if spec != "coslat":
            raise InputError(f"weights={spec!r} is not understood; use 'coslat', an array or a dict.")
        name, lat, own, units = _find_latitude(ds, v)
        if np.dtype(own.dtype).kind not in "biuf":
            raise InputError(
                f"weights='coslat': latitude coordinate {name!r} holds {own.dtype} values (e.g. {own.flat[0]!r}), not "
                "numbers. Give it numeric latitudes in degrees (or radians with units='radians'), or pass the "
                "weights as an array.")
        radians = str(units).strip().lower() in RADIAN_UNITS
        lat, own = lat.astype(np.float64), own.astype(np.float64)
        limit = np.pi / 2 if radians else 90.0
        beyond = ~(np.abs(own) <= limit)  # NaN too; counted over the coordinate's own values, not grid points
        if beyond.any():
            unit = "radians (units='radians': they lie in [-π/2, π/2])" if radians else "degrees (they lie in [-90, 90])"
            raise InputError(
                f"weights='coslat': latitude coordinate {name!r} holds {float(own[beyond].flat[0])!r}, which is no "
                f"latitude in {unit}; {int(beyond.sum())} of its {own.size} value(s) are so. Fix "
                "the coordinate (or its units attribute), or pass the weights as an array."
            )
        if not radians:
            lat = np.deg2rad(lat)
        # A pole's cos is 6e-17 in float64, not 0: a tiny positive weight (its grid cell has no area).
        spec = np.sqrt(np.clip(np.cos(lat), 0.0, 1.0))
    if isinstance(spec, xr.DataArray):
        extra = [d for d in spec.dims if d not in v.dims]
        if extra:
            raise InputError(
                f"weights have dims {list(spec.dims)}, but {_label(v.name)} has feature dims "
                f"{list(v.dims)}: {extra} are not feature dims, so they do not broadcast."
            )
        for d in spec.dims:
            if spec.sizes[d] != dict(zip(v.dims, v.shape))[d]:
                raise InputError(
                    f"weights have size {spec.sizes[d]} along {d!r} but {_label(v.name)} has "
                    f"{dict(zip(v.dims, v.shape))[d]}; they do not broadcast."
                )
        template = xr.DataArray(np.ones(v.shape), dims=v.dims)
        return (template * spec.transpose(*[d for d in v.dims if d in spec.dims])).transpose(*v.dims).values
    array = np.asarray(spec, dtype=np.float64)
    try:
        return np.broadcast_to(array, v.shape).astype(np.float64)
    except ValueError:
        raise InputError(
            f"weights of shape {array.shape} do not broadcast over the feature dims "
            f"{list(v.dims)} of shape {v.shape} of {_label(v.name)} (NumPy aligns trailing axes). "
            "Pass a DataArray with named dims, or an array of shape "
            f"{v.shape}."
        ) from None


def _find_latitude(ds, v: VariableLayout) -> tuple[str, np.ndarray, np.ndarray, str]:
    """``(name, values broadcast over v's feature dims, the coordinate's own values, its units)``
    of the latitude coordinate."""
    import xarray as xr

    candidates = []
    for name, coord in ds.coords.items():
        named = str(name).lower() in LATITUDE_NAMES
        standard = coord.attrs.get("standard_name") == "latitude" or coord.attrs.get("units") in (
            "degrees_north",
            "degree_north",
            "degrees_N",
        )
        if (named or standard) and set(coord.dims) <= set(v.dims) and coord.dims:
            candidates.append((not standard, name, coord))
    if not candidates:
        raise InputError(
            f"weights='coslat' needs a latitude coordinate over the feature dims of "
            f"{_label(v.name)} (looked for names {list(LATITUDE_NAMES)} or "
            f"standard_name='latitude'); coords present: {list(ds.coords)}. Pass weights as an "
            "array instead."
        )
    _, name, coord = sorted(candidates, key=lambda c: c[:2])[0]
    own = np.asarray(coord.values)
    units = coord.attrs.get("units", "degrees")
    if np.dtype(own.dtype).kind not in "biuf":
        return str(name), own, own, units  # refused by the caller, by name
    template = xr.DataArray(np.ones(v.shape), dims=v.dims)
    return str(name), (template * coord.variable).transpose(*v.dims).values, own, units

"""HilbertPCA on a field stored one time step per chunk: the plan's predicted seconds against the
measured fit (median of repeats; the development machine is shared, so run it when quiet).

    python benchmarks/hilbert_relayout.py [--folder /tmp/hb] [--repeats 3] [--relayout]

``--relayout`` scales the strip re-layout's thresholds to this field (strips of 1200 columns; the
86 MB field counts as large) so that the fit takes the re-layout road; without it the field is
read as one strip (below ``_geometry.RELAYOUT_BYTES``).
"""

import argparse
import statistics
import time
from pathlib import Path

import dask
import numpy as np
import xarray as xr

N_TIME, N_LAT, N_LON = 3000, 60, 120


def field(folder: Path) -> Path:
    path = folder / "hilbert-field.zarr"
    if not path.exists():
        rng = np.random.default_rng(0)
        t = np.arange(N_TIME)[:, None, None]
        lon = np.arange(N_LON)[None, None, :]
        lat = np.linspace(-60, 60, N_LAT)[None, :, None]
        # Six travelling waves well above the noise: the four kept complex modes have a gap.
        values = np.full((N_TIME, N_LAT, N_LON), 280.0)
        for i, amplitude in enumerate((4.0, 3.0, 2.0, 1.5, 0.6, 0.4)):
            values += amplitude * np.cos(2 * np.pi * (t / (23.0 + 11 * i) - (i + 1) * lon / N_LON) + i) * np.exp(
                -((lat - 40 * np.sin(i)) / 30) ** 2)
        values = (values + 0.2 * rng.standard_normal((N_TIME, N_LAT, N_LON))).astype(np.float32)
        ds = xr.Dataset({"t2m": (("time", "lat", "lon"), values)},
                        coords={"time": np.arange(N_TIME), "lat": np.linspace(-60, 60, N_LAT), "lon": np.arange(N_LON) * 3.0})
        ds.to_zarr(path, encoding={"t2m": {"chunks": (1, N_LAT, N_LON)}}, zarr_format=3, consolidated=False)
    return path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--folder", default="/tmp/hb")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--relayout", action="store_true")
    args = parser.parse_args()
    from daskpca.eof.hilbert import HilbertPCA
    from daskpca.passes import _geometry

    if args.relayout:
        _geometry.STRIP_BYTES = N_TIME * 4 * 1200
        _geometry.RELAYOUT_BYTES = 64 * 2**20
    path = field(Path(args.folder))
    X = xr.open_zarr(path, consolidated=False)["t2m"]
    plan = HilbertPCA(4, weights="coslat").plan(X, sample_dims="time")
    print(plan, flush=True)
    measured = []
    with dask.config.set(scheduler="threads"):
        for _ in range(args.repeats):
            start = time.perf_counter()
            model = HilbertPCA(4, weights="coslat", random_state=0).fit(X, sample_dims="time")
            measured.append(time.perf_counter() - start)
            print(f"fit {measured[-1]:.2f} s: {model.solver_}, {model.n_passes_} read(s), "
                  f"info relayout={model.solver_info_.get('relayout')!r}, copy passes={model.solver_info_.get('copy_passes')}, "
                  f"Krylov passes={model.solver_info_.get('n_iter')}, pass seconds={np.round(model.pass_seconds_, 2).tolist()}",
                  flush=True)
    median = statistics.median(measured)
    print(f"predicted {plan.seconds:.2f} s, measured median {median:.2f} s ({measured}), ratio {median / plan.seconds:.2f}")


if __name__ == "__main__":
    main()

"""The main job: `daskpca demo` runs end to end as a real console script."""

import subprocess
import sys

import numpy as np
import zarr

from daskpca import cli


def test_demo_writes_components_and_scores(tmp_path, capsys):
    args = ["demo", "--dir", str(tmp_path / "demo"), "--n-samples", "20000", "--n-features", "40",
            "--chunk-rows", "4000", "--n-components", "5", "--memory-limit", "1GiB"]
    done = subprocess.run([sys.executable, "-m", "daskpca.cli", *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Dask dashboard: http" in done.stdout
    assert "1 pass over the data" in done.stdout and "cumulative" in done.stdout
    results = sorted((tmp_path / "demo").glob("results-*"))
    assert len(results) == 1
    components = zarr.open_array(str(results[0] / "components.zarr"), mode="r")[...]
    scores = zarr.open_array(str(results[0] / "scores.zarr"), mode="r")
    assert components.shape == (5, 40) and scores.shape == (20000, 5)
    np.testing.assert_allclose(components @ components.T, np.eye(5), atol=1e-10)
    # A second run reuses the sample array (the same command, in this process: the console
    # script was run above, a second interpreter start would prove nothing more).
    capsys.readouterr()
    assert cli.main(args) == 0
    assert "reusing the sample array" in capsys.readouterr().out

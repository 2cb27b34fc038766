"""benchmarks/gpu.py (issue 40) runs end to end on tiny sizes, NumPy standing in for CuPy here.

The full run happens once, unattended, on a GPU machine: these tests make sure that the script
itself — every case, road, floor, the CPU side, the scores, the table, the JSON, the budget and
its watchdog — works before that one try.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_script(tmp_path, *args):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OUT", None)
    return subprocess.run([sys.executable, "-m", "benchmarks.gpu", "--smoke", "--out", str(tmp_path),
                           "--data-dir", str(tmp_path / "data"), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def only_json(folder: Path) -> dict:
    (path,) = folder.glob("gpu-smoke-*.json")
    return json.loads(path.read_text())


def test_smoke_runs_every_road_of_every_case_on_both_sides(tmp_path):
    done = run_script(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    record = only_json(tmp_path)
    rows = {(r["case"], r["road"]): r for r in record["rows"]}
    from benchmarks.gpu import TALL_ROADS, WIDE_ROADS

    for case, roads in {"a": TALL_ROADS, "b": TALL_ROADS, "c": WIDE_ROADS, "d": TALL_ROADS}.items():
        for road in [*roads, "transform"]:
            row = rows[(case, road)]
            assert row["gpu_error"] is None and row["cpu_error"] is None and not row["skipped"], row
            assert row["gpu_s"] > 0 and row["cpu_s"] > 0, row
    # The exact roads and the hand-written floors agree with the CPU answer to round-off; the
    # approximate ones are scored against it too (ALS / PPCA are capped at 3 iterations here).
    for case, exact in {"a": "covariance", "b": "covariance", "c": "gram", "d": "covariance"}.items():
        assert rows[(case, exact)]["sin_theta"] < 1e-10
        assert rows[(case, "auto")]["sin_ref"] == f"CPU {exact} of {case}"
        assert rows[(case, "krylov")]["sin_theta"] <= max(rows[(case, "krylov")]["bound"], 1e-10)
        assert all(rows[(case, road)]["sin_theta"] is not None for road in ("randomized", "als", "ppca"))
        assert rows[(case, "transform")]["extra"]["scores_relative_difference"] < 1e-6
    floors = {"a": "floor: f64 XᵀX + eigh", "b": "floor: f64 XᵀX + eigh", "c": "floor: f64 XXᵀ + eigh + Xᵀu"}
    for case, floor in floors.items():
        assert rows[(case, floor)]["floor_s"] > 0 and rows[(case, floor)]["sin_theta"] < 1e-10
    assert rows[("d", "floor: host decode (zarr)")]["floor_s"] > 0
    assert record["warm_up_failures"] == {}  # NumPy stands in where CuPy is absent; CuPy runs it where present
    # The table: one line per row, with the ratios of the same run.
    assert "| road" in done.stdout and "GPU/floor" in done.stdout and "CPU/GPU" in done.stdout
    assert done.stdout.count("\n| ") >= len(record["rows"]) + 1


def test_spent_budget_skips_and_lists_every_row(tmp_path, capsys):
    from benchmarks.gpu import main

    assert main(["--smoke", "--budget-s", "0", "--grace-s", "600", "--cases", "a,c", "--out", str(tmp_path),
                 "--data-dir", str(tmp_path / "data")]) == 0
    record = only_json(tmp_path)
    assert record["rows"] and all(r["gpu_s"] is None and r["cpu_s"] is None for r in record["rows"])
    assert all(any("budget" in s for s in r["skipped"]) for r in record["rows"])
    out = capsys.readouterr().out
    assert f"Skipped ({len(record['rows'])})" in out and "- c gram: all: budget of 0 s spent" in out


def test_watchdog_ends_an_overrun_with_its_record_written(tmp_path):
    # Past budget + grace the row still running is abandoned: exit 3, the JSON says so.
    done = run_script(tmp_path, "--budget-s", "0.2", "--grace-s", "0.1")
    assert done.returncode == 3, (done.stdout[-2000:], done.stderr[-2000:])
    record = only_json(tmp_path)
    assert "budget overrun" in record["overrun"] and "budget overrun" in done.stdout
    assert "| road" in done.stdout  # the table of what ended is printed before the exit

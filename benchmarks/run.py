"""Side-by-side benchmark of daskpca against its floors and its peers.

    python -m benchmarks.run --cases tall,wide,square [--quick] [--json out.json]
                             [--data-dir DIR] [--methods floor-*,daskpca-*] [--cluster]

(from the repository root). For every case this

1. generates a zarr v3 input once and computes the exact top-k answer once
   (:mod:`benchmarks.cases`: the cases are defined there);
2. runs every method (:mod:`benchmarks.methods`: the methods are defined there) in a fresh
   subprocess, with the input in the page cache (:mod:`benchmarks.runner`: why a subprocess);
3. prints one table (:mod:`benchmarks.tables`).


Columns
-------
wall s      seconds of the fit alone (imports, cluster start-up and data generation excluded;
            scikit-learn rows include loading the array into memory, which they need).
×read       wall / wall of ``floor-read`` (one read of the array).
×gram       wall / wall of ``floor-gram`` (one read + one float64 blockwise XᵀX or XXᵀ: the
            floor for any exact one-pass PCA).
peak GB     peak RSS of the method's whole process tree (the subprocess plus every descendant:
            distributed workers and nanny processes included), sampled every 20 ms with psutil
            from this parent process. Includes the interpreter and imports (~0.15–0.3 GB).
passes      full reads of the input the method says it made (``n_passes_``), if it says.
reads       bytes the process tree read during the fit (``read_chars`` from /proc, page-cache
            hits included) divided by the stored size of the array: a measured pass count that
            does not trust the method.
sin θ       largest principal angle between the method's top-k subspace and the exact one
            (‖(I − QₓQₓᵀ)Q‖₂, accurate down to ~1e-15).
other CPU   CPU time used by processes *outside* the method's tree while the row ran, as a % of
            the machine (cores × elapsed). Above ~10 % the row was slowed by someone else's work
            (on a shared 2-core machine that matters); rerun it or use --repeat.
"""


from __future__ import annotations

import argparse
import fnmatch
import json
import sys
import tempfile
from pathlib import Path

from . import cases, methods, runner, tables


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="tall,wide,square", help=f"comma-separated: {', '.join(cases.FULL_CASES)} (huge: 40 GB on disk)")
    ap.add_argument("--quick", action="store_true", help="10× smaller inputs (smoke test)")
    ap.add_argument("--json", type=Path, help="also write all rows and machine info here")
    ap.add_argument("--data-dir", type=Path, default=cases.DEFAULT_DATA_DIR)
    ap.add_argument("--methods", default="*", help="comma-separated names or globs, e.g. 'floor-*,daskpca-*'; exact names may "
                    "also be variants: daskpca-randomized-q<q>[-p<p>], daskpca-als-i<iterations>, daskpca-ppca-i<iterations>")
    runner.add_row_options(ap, timeout=900.0)
    ap.add_argument("--list", action="store_true", help="print the methods for each case and exit")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        runner.child_main(json.loads(args.child))
        return 0

    table = cases.QUICK_CASES if args.quick else cases.FULL_CASES
    names = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in names if c not in table]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; choose from {sorted(table)}")
    patterns = [p.strip() for p in args.methods.split(",") if p.strip()]
    info = runner.machine_info()
    print(f"# {info['date']}  {info['cpus']} CPUs, {info['ram_gib']} GiB RAM, python {info['python']}")
    print(f"# versions: {', '.join(f'{k} {v}' for k, v in info['versions'].items())}")
    print(f"# BLAS: {'; '.join(info.get('blas', []))}; env: {info['env'] or 'no OPENBLAS_*/OMP_* set'}")
    all_rows = []
    with tempfile.TemporaryDirectory(prefix="daskpca-bench-") as tmpdir:
        tmp = Path(tmpdir)
        for name in names:
            case = table[name]
            path = cases.ensure_data(args.data_dir, case)
            exact = cases.ensure_exact(args.data_dir, case, path)
            stored = cases.stored_bytes(path)
            chosen = [m for m in methods.list_methods(case) if any(fnmatch.fnmatch(m, p) for p in patterns)]
            # Exact names outside the default list are variants method_function knows (-q3-p30, -i10).
            chosen += [p for p in patterns if not any(c in p for c in "*?[") and p not in chosen]
            if args.list:
                print(f"{case.name}: {', '.join(chosen)}")
                continue
            cache_note = runner.prepare_page_cache(path, stored)
            print(f"\n## {case.name}: {case.n} × {case.d} float32, chunks {case.chunks}, k = {case.k}, "
                  f"{stored / 1e9:.2f} GB stored ({cache_note})"
                  f"{', --cluster' if args.cluster else ''}{f', BLAS threads {args.blas_threads}' if args.blas_threads else ''}", flush=True)
            rows, floors = [], {}
            for method in chosen:
                row = runner.run_scored(method, case, path, exact, args, tmp)
                if method.startswith("floor-") and row.get("status") == "ok":
                    floors[method] = row["wall"]
                rows.append(row)
                sin_part = "" if row.get("sin_theta") is None else f", sin θ {row['sin_theta']:.1e}"
                note_part = "" if not row.get("note") else " — " + str(row["note"])[:160]
                print(f"  {method}: {row.get('status')} {row.get('wall', float('nan')):.2f} s, "
                      f"peak {row['peak_rss'] / 1e9:.2f} GB{sin_part}{note_part}", flush=True)
            print()
            print(tables.render_table([tables.fmt_row(r, floors, stored) for r in rows]), flush=True)
            for r in rows:
                r["stored_bytes"] = stored
                r["case_params"] = case.params()
            all_rows += rows
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump({"machine": info, "cluster": args.cluster, "blas_threads": args.blas_threads, "quick": args.quick, "rows": all_rows}, fh, indent=1, default=str)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Execute every notebook in notebooks/ top to bottom, in a temporary working directory.

A notebook that raises in any cell fails its test. Notebooks write their data (zarr stores) to
the working directory, so each runs in ``tmp_path`` and nothing lands in the repository. The
committed notebooks carry no outputs (checked too, so large embedded images never get in).

Timing on 2 cores: about 10–20 s each, the out-of-core one about 45 s (it writes and reads a
950 MiB array); it is marked ``slow`` (run with ``--run-slow``; CI runs it, see conftest.py). The
notebooks execute two at a time in the background (``executions``), once per run whatever the
number of xdist workers, each test waiting for its own.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
SLOW = {"06_out_of_core.ipynb"}
#: Notebooks that need a daskpca module which may land separately: skipped (with the reason
#: shown) rather than failed while it is absent.
CELL_TIMEOUT = 300  # seconds per cell


def _params(*, executing: bool = False):
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        marks = [pytest.mark.slow] if executing and path.name in SLOW else []
        yield pytest.param(path, id=path.stem, marks=marks)


def test_there_are_notebooks():
    assert len(list(NOTEBOOKS.glob("*.ipynb"))) >= 7


@pytest.mark.parametrize("path", list(_params()))
def test_notebook_is_committed_without_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, (
                f"{path.name} has outputs committed; strip them (e.g. jupyter nbconvert "
                "--clear-output --inplace)"
            )


def _execute(path: Path, directory: Path):
    """Run ``path`` in a fresh kernel with ``directory`` as its working directory; return it."""
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(directory)}},
    )
    client.execute()
    return notebook


def _shared_folder(tmp_path_factory) -> Path:
    """A folder of this pytest run that every xdist worker sees (each worker's basetemp is a
    ``popen-gwN`` folder inside the run's own); without xdist, the run's basetemp."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "notebook-executions"
    folder.mkdir(exist_ok=True)
    return folder


def _execute_into(path: Path, directory: Path, shared: Path):
    """Execute ``path``; publish the executed notebook (or the error) in ``shared`` atomically."""
    try:
        notebook = _execute(path, directory)
    except BaseException as error:  # reported by the test of this notebook, in whichever worker
        import traceback

        target, text = shared / f"{path.stem}.error", "".join(traceback.format_exception(error))
    else:
        target, text = shared / f"{path.stem}.ipynb", nbformat.writes(notebook)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(text)
    os.replace(partial, target)


def _executed(path: Path, shared: Path, timeout: float = 30 * 60):
    """The executed notebook, once whichever worker runs it has published it."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (shared / f"{path.stem}.error").exists():
            raise AssertionError(f"{path.name} failed to execute:\n{(shared / f'{path.stem}.error').read_text()}")
        if (shared / f"{path.stem}.ipynb").exists():
            return nbformat.read(shared / f"{path.stem}.ipynb", as_version=4)
        time.sleep(0.2)
    raise AssertionError(f"{path.name} was not executed within {timeout:.0f} s")


@pytest.fixture(scope="module")
def executions(request, tmp_path_factory):
    """Every notebook this run will test, executed two at a time in the background, once.

    Kernels spend much of their time starting up, importing and waiting for their clusters: two
    at once keep both cores busy. Each test then waits for its own notebook's result.

    Under xdist every worker's session lists every collected test, so each worker that ran one
    notebook test used to execute *all* the notebooks (three times the work on CI). Now the first
    worker to get here claims the executions (an atomic ``mkdir`` in a folder of the run shared by
    the workers), runs them and publishes each result there; a test in any worker waits for its
    notebook's. The executing worker's teardown waits for every notebook (never cancels one: other
    workers may be waiting for it).
    """
    from concurrent.futures import ThreadPoolExecutor

    wanted = [item.callspec.params["path"] for item in request.session.items
              if item.originalname == "test_notebook_executes" and not item.get_closest_marker("skip")]
    shared = _shared_folder(tmp_path_factory)
    try:
        (shared / "claimed").mkdir()
    except FileExistsError:  # another worker (or an earlier setup of this module here) runs them
        yield shared
        return
    # Keep the kernel off any display and its matplotlib inline (kernels inherit the environment).
    previous = os.environ.get("MPLBACKEND")
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="notebook")
    try:
        for path in sorted(wanted, key=lambda path: path.name not in SLOW):  # the longest first
            pool.submit(_execute_into, path, tmp_path_factory.mktemp(path.stem), shared)
        yield shared
    finally:
        pool.shutdown(wait=True)
        if previous is None:
            os.environ.pop("MPLBACKEND", None)
        else:
            os.environ["MPLBACKEND"] = previous


@pytest.mark.parametrize("path", list(_params(executing=True)))
def test_notebook_executes(path, executions):
    notebook = _executed(path, executions)
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "error"
    ]
    assert not errors
    images = sum(
        "image/png" in output.get("data", {})
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )
    assert images >= 1, f"{path.name} drew no figure"
    assert not any(Path(path.parent).glob("*.zarr")), "a notebook wrote into the repository"

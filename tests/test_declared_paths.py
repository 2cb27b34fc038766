"""Every command's declared inputs × outputs × {equal, inside, around, symlink, s3}: exit 2 before
anything is claimed, read or written (daskpca/cli/declarations.py), and no path option of the
parser is left undeclared."""

import hashlib
import os
from pathlib import Path

import pytest

from daskpca import cli
from daskpca.cli.command import build_parser
from daskpca.cli.declarations import PATHS, declared

#: A command line per command naming every declared path as {label}; the other flags only make
#: the line complete (the path check runs before any of them is looked at).
TEMPLATES = {
    "fit": ["fit", "{SOURCE}", "-k", "2", "--out", "{--out}", "--scores", "{--scores}", "--mca", "--with", "{--with}",
            "--spectrum-from", "{--spectrum-from}", "--config", "{--config}", "--overwrite"],
    "transform": ["transform", "{MODEL}", "{SOURCE}", "--out", "{--out}", "--config", "{--config}", "--overwrite"],
    "update": ["update", "{MODEL}", "{SOURCE}", "--config", "{--config}"],
    "inspect": ["inspect", "{PATH}", "--spectrum-from", "{--spectrum-from}", "--config", "{--config}"],
    "report": ["report", "{MODEL}", "--out", "{--out}", "--bootstrap", "10", "--data", "{--data}",
               "--config", "{--config}", "--overwrite"],
    "history": ["history", "{MODEL}", "--config", "{--config}"],
    "rollback": ["rollback", "{MODEL}", "--to", "v1", "--config", "{--config}"],
    "demo": ["demo", "--config", "{--config}"],
}
#: Metavars (and dests) of options that name a store or file; each must be declared.
PATH_METAVARS = {"SOURCE", "SOURCE2", "MODEL", "SCORES", "DIR", "TOML", "PATH"}
#: demo writes files it names itself inside --dir, never --dir: no path of the job can be one.
UNDECLARED = {("demo", "dir")}


def _pairs():
    for command in PATHS:
        inputs, outputs = declared(command)
        labels = list(outputs)
        for i, out in enumerate(labels):
            for other in list(inputs) + labels[i + 1:]:
                for relation in ("equal", "inside", "around", "symlink", "s3"):
                    if relation == "s3" and "--config" in (out, other):
                        continue  # a job file is local
                    yield pytest.param(command, out, other, relation, id=f"{command}:{out}~{other}:{relation}")


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            for p in sorted(root.rglob("*"))}


def _make(path: Path, label: str) -> None:
    if label == "--config":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")  # an empty job file is a valid one
    else:
        path.mkdir(parents=True, exist_ok=True)
        (path / "zarr.json").write_text('{"precious": true}')


@pytest.mark.parametrize("command, out, other, relation", list(_pairs()))
def test_an_output_meeting_an_input_or_output_is_refused_before_anything(tmp_path, capsys, command, out, other, relation):
    root = tmp_path / "job"
    root.mkdir()
    inputs, outputs = declared(command)
    paths = {label: str(root / ("p" + label.strip("-").lower())) for label in {**inputs, **outputs}}
    for label in inputs:  # every input exists and holds something to destroy
        _make(Path(paths[label]), label)
    if relation == "s3":
        paths[other], paths[out] = "s3://bucket/a/s.zarr", "s3://bucket/a/x/../s.zarr/"
    elif relation == "equal":
        paths[out] = str(root / "sub" / ".." / Path(paths[other]).name)
    elif relation == "inside":
        paths[out] = str(Path(paths[other]) / "inner")
    elif relation == "around":
        paths[other] = str(root / "outer" / "thing")
        paths[out] = str(root / "outer")
        if other in inputs:
            _make(Path(paths[other]), other)
    elif relation == "symlink":
        os.symlink(paths[other], root / "link")  # dangling when the other is an output not yet written
        paths[out] = str(root / "link")
    argv = [paths[a[1:-1]] if a.startswith("{") else a for a in TEMPLATES[command]]
    before = _tree(root)
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"the output {out}" in err and other in err and "path of its own" in err, err
    assert _tree(root) == before  # nothing written, claimed or destroyed


def test_every_path_option_of_every_command_is_declared():
    parser = build_parser()
    assert set(parser.command_parsers) == set(PATHS) == set(TEMPLATES)
    for command, sub in parser.command_parsers.items():
        inputs, outputs = declared(command)
        attributes = set(inputs.values()) | set(outputs.values())
        for action in sub._actions:
            if (action.metavar in PATH_METAVARS or action.dest in ("dir", "data")) and (command, action.dest) not in UNDECLARED:
                assert action.dest in attributes, f"`daskpca {command}` {action.dest}: declare it in cli/declarations.py"
        labels = {a[1:-1] for a in TEMPLATES[command] if a.startswith("{")}
        assert labels == set(inputs) | set(outputs), command


def test_reproducers_of_issue_29(tmp_path, capsys):
    # report --data S --out S / --out S/rep, and fit --mca --with S --out S (also through a symlink).
    data = tmp_path / "s.zarr"
    _make(data, "SOURCE")
    os.symlink(data, tmp_path / "link.zarr")
    before = _tree(tmp_path)
    for argv in (["report", str(tmp_path / "m.zarr"), "--out", str(data), "--overwrite", "--bootstrap", "10", "--data", str(data)],
                 ["report", str(tmp_path / "m.zarr"), "--out", str(data / "rep"), "--bootstrap", "10", "--data", str(data)],
                 ["fit", str(tmp_path / "a.zarr"), "--mca", "--with", str(data), "-k", "2", "--out", str(data), "--overwrite"],
                 ["fit", str(tmp_path / "a.zarr"), "--mca", "--with", str(data), "-k", "2", "--out",
                  str(tmp_path / "link.zarr"), "--overwrite"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert ("input --data" in err or "input --with" in err) and "path of its own" in err, err
    assert _tree(tmp_path) == before

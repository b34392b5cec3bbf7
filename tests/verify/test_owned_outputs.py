"""``evaluate``, ``report`` and ``benchmark`` touch only what their ledger records (issue 27).

A sandbox of a user's files (hidden temporaries, product-like names such as ``scores.csv``,
``benchmark.md`` and ``cases/``, a sibling folder, a link out) is hashed before and after every
run: a folder ensml does not own is refused in one line before any work; in a folder it owns,
a rerun replaces its own outputs and leaves the user's files beside them byte-identical; a
planned name that is a user's file is refused; a full disk is one line with nothing left.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from ensml.cli.main import main
from ensml.data.outputs import STATE_DIR, Ledger
from tests.cli.process import finish, start_cli
from tests.data.outputs_sandbox import make_sandbox, run_python, snapshot
from tests.verify.reference_inputs import CASE


def _args(verb: str, data: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return [
        verb,
        f"--forecast={data['forecast']}",
        f"--analysis={data['analysis']}",
        f"--oracle={data['oracle']}",
        f"--out_dir={out}",
        *extra,
    ]


def _one_line(capsys, *words: str) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert lines and lines[-1].startswith("ensml: "), lines
    assert all(w in lines[-1] for w in words), lines[-1]
    return lines[-1]


def _ledger(out: Path) -> dict[str, str]:
    """Name → command of the entries of ``out``'s ledger (its folders' parents left out)."""
    entries = Ledger.load(out / STATE_DIR).entries
    return {name: e.command for name, e in entries.items() if e.kind != "parent"}


@pytest.mark.parametrize(
    ("verb", "extra"),
    [
        ("evaluate", ()),
        ("report", ()),
        ("benchmark", ()),
    ],
)
def test_a_folder_ensml_does_not_own_is_refused(verb, extra, tiny_data, tmp_path, capsys) -> None:
    mine = make_sandbox(tmp_path / "mine", tmp_path / "outside")
    before = snapshot(tmp_path)
    if verb == "benchmark":  # refused before the data are made and any model is trained
        args = ["benchmark", f"--data_dir={tmp_path / 'data'}", f"--out_dir={mine}"]
    else:
        args = _args(verb, tiny_data, mine, *extra)
    assert main(args) == 1
    _one_line(capsys, str(mine), "did not write")
    assert snapshot(tmp_path) == before


def _users(files: dict[str, str], out: Path, ours: dict[str, str]) -> dict[str, str]:
    """The entries of a snapshot that are not ensml's: outside ``out`` or not in its ledger."""
    state = str(out / STATE_DIR)
    return {k: v for k, v in files.items() if not k.startswith(state) and _rel(k, out) not in ours}


def _rel(path: str, out: Path) -> str:
    return Path(path).relative_to(out).as_posix() if Path(path).is_relative_to(out) else path


@pytest.mark.slow
def test_evaluate_rerun_replaces_only_its_own_files(tiny_data, tmp_path, capsys) -> None:
    out = tmp_path / "eval"
    case = tmp_path / "case.yaml"
    case.write_text(yaml.safe_dump({**CASE, "lead": "48h"}))
    assert main(_args("evaluate", tiny_data, out, f"--cases={case}")) == 0
    ours = _ledger(out)
    assert {"scores.csv", "scores.md", "scores.nc", "cases/cases.csv"} <= set(ours)
    assert set(ours.values()) == {"evaluate"}
    # the user's files beside and inside ensml's: product-like names, a figure in cases/
    make_sandbox(out / "user", tmp_path / "outside")
    (out / "cases" / "my_case.png").write_bytes(b"\x89PNG the user's own")
    (out / "figures").mkdir()
    (out / "figures" / "fig.png").write_bytes(b"\x89PNG mine")
    (out / "notes.md").write_text("my notes\n")
    user = _users(snapshot(tmp_path), out, ours)
    old_scores = (out / "scores.csv").read_bytes()
    capsys.readouterr()
    assert main(_args("evaluate", tiny_data, out)) == 0  # no cases now: its case files are stale
    after = snapshot(tmp_path)
    assert {k: after.get(k) for k in user} == user  # every file of the user's, byte-identical
    assert (out / "cases" / "my_case.png").is_file() and not (out / "cases" / "cases.csv").exists()
    assert (out / "scores.csv").read_bytes() == old_scores  # the same numbers, rewritten
    assert not any(n.startswith("cases/") for n in _ledger(out))


@pytest.mark.slow
def test_evaluate_refuses_a_name_that_is_a_users_file(tiny_data, tmp_path, capsys) -> None:
    out = tmp_path / "eval"
    assert main(_args("evaluate", tiny_data, out)) == 0
    (out / "scores.md").unlink()  # the user deletes ensml's table and writes their own
    (out / "scores.md").write_text("# my table\n")
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert main(_args("evaluate", tiny_data, out)) == 1
    _one_line(capsys, "scores.md")
    assert snapshot(tmp_path) == before


@pytest.mark.slow  # two report runs
def test_report_rerun_keeps_the_users_figures(tiny_data, fitted, tmp_path, capsys) -> None:
    out = tmp_path / "report"
    preds = fitted / "runs" / "smoke" / "predictions.nc"
    assert main(_args("report", tiny_data, out, f"--predictions={preds}")) == 0
    assert (out / "figures" / "crps_skill_map.png").is_file()
    ours = _ledger(out)
    assert "figures/crps_skill_map.png" in ours and "tables/scores.csv" in ours
    (out / "figures" / "my_figure.png").write_bytes(b"\x89PNG the user's")
    (out / "tables" / "my_table.csv").write_text("a,b\n1,2\n")
    make_sandbox(out / "cases", tmp_path / "outside")
    user = _users(snapshot(tmp_path), out, ours)
    capsys.readouterr()
    assert main(_args("report", tiny_data, out)) == 0  # no predictions: no skill map now
    after = snapshot(tmp_path)
    assert {k: after.get(k) for k in user} == user
    assert not (out / "figures" / "crps_skill_map.png").exists()  # the report's own, stale: removed
    assert (out / "report.md").is_file() and (out / "tables" / "scores.csv").is_file()


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_leaves_nothing(tiny_data, tmp_path) -> None:
    out = tmp_path / "eval"
    code = f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
        from ensml.cli.main import main
        resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))
        sys.exit(main({_args("evaluate", tiny_data, out)!r}))
    """
    done = run_python(code, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    err = done.stderr.strip()
    assert "Traceback" not in err, err
    last = err.splitlines()[-1]
    assert last.startswith("ensml: ") and "evaluate" in last and "too large" in last, last
    left = [p for p in out.rglob("*") if ".ensml" not in p.parts] if out.exists() else []
    assert left == [], left


def test_benchmark_range_checks_before_any_side_effect(tmp_path, capsys) -> None:
    for bad in ("--limit_train_batches=-3", "--threads=100000", "--k=0"):
        assert (
            main(["benchmark", f"--data_dir={tmp_path / 'data'}", f"--out_dir={tmp_path / 'out'}", bad]) != 0
        )
        err = capsys.readouterr().err.strip()
        assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.slow  # two evaluate runs
def test_two_evaluate_runs_into_one_folder(tiny_data, tmp_path: Path) -> None:
    """Two runs at once: each writes the whole folder or stops in one line naming the other."""
    args = _args("evaluate", tiny_data, Path("out"))
    runs = [start_cli(args, tmp_path) for _ in range(2)]
    done = [finish(run, f"concurrent run {i}") for i, run in enumerate(runs)]  # stdout and stderr
    assert 0 in [d.returncode for d in done], [d.stdout[-2000:] for d in done]
    for d in done:
        if d.returncode != 0:
            last = d.stdout.strip().splitlines()[-1]
            assert d.returncode == 1 and "Traceback" not in d.stdout and last.startswith("ensml: "), last
    out = tmp_path / "out"
    written = {"scores.csv", "scores.md", "scores.nc", "decomposition.csv", "decomposition.md"}
    assert {p.name for p in out.iterdir()} == {STATE_DIR, *written}
    assert set(_ledger(out)) == written
    assert not list((out / STATE_DIR / "staging").glob("*/*")), "a temporary was left behind"

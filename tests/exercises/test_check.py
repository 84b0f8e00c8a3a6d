"""Tests of the student's check command, ``python -m course_exercises.check``."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import numpy as np
import torch
import pytest

from course_exercises import check
from course_exercises.check import CaseResult, CheckRun, default_notebooks, format_report, resolve_chapters

ROOT = Path(__file__).resolve().parents[2]
cases = check.load_cases()


def test_resolve_chapters():
    assert resolve_chapters(["4", "04", "05_multi_head_attention.ipynb", "ch10"], cases.NOTEBOOKS) == ["04", "05", "10"]
    assert resolve_chapters([], cases.NOTEBOOKS) == []
    for bad in ("14", "0", "attention"):
        with pytest.raises(ValueError, match="unknown chapter"):
            resolve_chapters([bad], cases.NOTEBOOKS)


def test_default_notebooks_are_relative_to_the_current_folder(tmp_path):
    assert default_notebooks(tmp_path, cases.NOTEBOOKS) is None  # never the clone's stubs elsewhere
    assert default_notebooks(ROOT, cases.NOTEBOOKS, ["04"]) == ROOT / "exercises"  # from a clone's root
    (tmp_path / "exercises").mkdir()
    (tmp_path / "exercises" / "04_attention.ipynb").write_text("{}")
    assert default_notebooks(tmp_path, cases.NOTEBOOKS, ["04"]) == tmp_path / "exercises"
    assert default_notebooks(tmp_path, cases.NOTEBOOKS, ["05"]) is None
    (tmp_path / "04_attention.ipynb").write_text("{}")
    assert default_notebooks(tmp_path, cases.NOTEBOOKS, ["04"]) == tmp_path
    assert default_notebooks(tmp_path, cases.NOTEBOOKS) == tmp_path


def test_check_from_another_folder_names_where_it_looked(tmp_path, monkeypatch, capsys):
    """Run from a folder without notebooks (inside a clone or not): exit 2 naming the folders, never the stubs."""
    monkeypatch.chdir(tmp_path)
    assert check.main(["04"]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path) in err and str(tmp_path / "exercises") in err and "04_attention.ipynb" in err, err
    assert "my_notebooks/ 04" in err and "--notebooks DIR" in err, err
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # a folder inside a clone-like tree: still only the current folder counts
    assert check.main(["04"]) == 2
    capsys.readouterr()


def test_check_runs_from_the_notebooks_folder_as_the_last_cell_does(tmp_path, monkeypatch, capsys):
    folder = _notebook_with(tmp_path, "08", {
        "causal_mask": ("if q_len < 1 or (k_len is not None and k_len < q_len):\n    raise ValueError('q_len, k_len')\n"
                        "k_len = q_len if k_len is None else k_len\n"
                        "return torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)[None, None]"),
    })
    monkeypatch.chdir(folder)  # Jupyter's current folder is the notebook's
    assert check.main(["08"]) == 0
    out = capsys.readouterr().out
    points = sum(c.points for c in cases.CASES if c.exercise == "8.2")
    assert re.search(rf"8\.2\s+causal_mask\s+{points}/{points}\s+all", out), out


def _code_cells_appended(folder: Path, chapter: str, *sources: str) -> Path:
    name = cases.NOTEBOOKS[chapter]
    nb = nbformat.read(folder / name, as_version=4)
    nb.cells.extend(nbformat.v4.new_code_cell(src) for src in sources)
    nbformat.write(nb, folder / name)
    return folder / name


def test_a_cell_that_does_not_parse_costs_only_its_own_definitions(tmp_path, capsys):
    folder = _notebook_with(tmp_path, "08", {
        "causal_mask": ("if q_len < 1 or (k_len is not None and k_len < q_len):\n    raise ValueError('q_len, k_len')\n"
                        "k_len = q_len if k_len is None else k_len\n"
                        "return torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)[None, None]"),
    })
    path = _code_cells_appended(folder, "08", "scratch = [1, 2\nprint(scratch", "def helper():\n    return 1\nimport no_such_module_here")
    numbers = check.code_cell_numbers(path)
    assert check.main(["08", "--notebooks", str(folder)]) == 0
    out = capsys.readouterr().out
    points = sum(c.points for c in cases.CASES if c.exercise == "8.2")
    assert re.search(rf"8\.2\s+causal_mask\s+{points}/{points}\s+all", out), out  # the rest is graded
    last_two = sorted(numbers.values())[-2:]
    assert out.count("syntax error") == 1 and f"code cell {last_two[0]} has a syntax error" in out, out
    assert out.count("No module named 'no_such_module_here'") == 1, out
    assert f"cell {last_two[1]}" in out and "(helper, no_such_module_here)" in out, out


def test_an_unreadable_notebook_is_said_once(tmp_path, capsys):
    (tmp_path / cases.NOTEBOOKS["08"]).write_text('{"cells": [', encoding="utf-8")
    assert check.main(["08", "--notebooks", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("not valid JSON") == 1, out
    assert "notebook cannot be read" in out and "Notebooks that cannot be read" in out, out


def test_a_dependent_exercise_runs_with_the_course_definition(tmp_path, capsys):
    """8.3 calls 8.2: a wrong causal_mask costs 8.2's points only, and the message says why 8.3 still runs."""
    folder = _notebook_with(tmp_path, "08", {
        "causal_mask": "k_len = q_len if k_len is None else k_len\n"
                       "return torch.ones(q_len, k_len, dtype=torch.bool).triu()[None, None]",  # wrong: the future
        "decoder_self_attention_mask": ("if tgt.dim() != 2:\n    raise ValueError('tgt')\n"
                                        "q_len = tgt.shape[1] if q_len is None else q_len\n"
                                        "if not 1 <= q_len <= tgt.shape[1]:\n    raise ValueError('q_len')\n"
                                        "return (tgt != pad_id)[:, None, None, :] & causal_mask(q_len, tgt.shape[1])"),
    })
    points = {ex: sum(c.points for c in cases.CASES if c.exercise == ex) for ex in ("8.2", "8.3")}
    assert check.main(["8", "--notebooks", str(folder)]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"8\.2\s+causal_mask\s+0/{points['8.2']}\s", out), out
    assert re.search(rf"8\.3\s+decoder_self_attention_mask\s+{points['8.3']}/{points['8.3']}\s+all", out), out


def test_a_failing_dependent_case_says_it_ran_with_the_course_definition(tmp_path, capsys):
    folder = _notebook_with(tmp_path, "08", {
        "decoder_self_attention_mask": "return causal_mask(tgt.shape[1]).expand(tgt.shape[0], 1, -1, -1)",  # no padding
    })
    assert check.main(["8", "--notebooks", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "ran with the course's causal_mask (exercise 8.2) in place of yours" in out, out


def test_standins_are_installed_only_for_their_cases_and_removed_after(tmp_path):
    from course_exercises.check_runner import NotebookLoader, run_case

    folder = _notebook_with(tmp_path, "08", {
        "causal_mask": "return 'student'",
        "decoder_self_attention_mask": "return causal_mask(tgt.shape[1])",
    })
    loader = NotebookLoader(folder, cases.NOTEBOOKS)
    ns = loader.get("08")
    by_id = {c.id: c for c in cases.CASES}
    run_case(by_id["8.3-pad-0"], cases, loader)
    assert ns.causal_mask(3) == "student"  # put back after the case
    kind, message = run_case(next(c for c in cases.CASES if c.exercise == "8.2" and "drawn" in c.id), cases, loader)
    assert kind == "failed" and "returned str" in message  # 8.2's own cases use the student's function


@pytest.mark.parametrize("body, words", [
    ("return (torch.arange(seq_len) < lengths[:, None])[:, None, None, :].numpy()", "returned numpy.ndarray of shape ("),
    ("return (torch.arange(seq_len) < lengths[:, None])[:, None, None, :].tolist()", "returned list of length"),
    ("(torch.arange(seq_len) < lengths[:, None])", "returned None"),
])
def test_return_type_rule_one_line_no_harness_frames(tmp_path, body, words):
    from course_exercises.check_runner import NotebookLoader, run_case

    folder = _notebook_with(tmp_path, "08", {"padding_mask": body})
    loader = NotebookLoader(folder, cases.NOTEBOOKS)
    case = next(c for c in cases.CASES if c.exercise == "8.1" and "rejects" not in c.id)
    kind, message = run_case(case, cases, loader)
    assert kind == "failed" and words in message and "return a torch.Tensor of bools" in message, message
    assert "File " not in message and "cases.py" not in message and "Traceback" not in message, message
    assert len(message.splitlines()) == 1, message


def test_numbers_are_accepted_where_one_number_is_the_answer():
    for value in (2.5, np.float32(2.5), np.array(2.5), torch.tensor(2.5), 2):
        assert cases.to_array(value, "f()", kind="f").shape == ()
    for value in (np.ones(3), [1.0, 2.0], (1.0,), None, "2.5"):
        with pytest.raises(TypeError, match="return a torch.Tensor"):
            cases.to_array(value, "f()", kind="f")


def test_format_report_table_and_messages():
    run = CheckRun(notebooks=ROOT / "exercises", chapters=["08"], results=[
        CaseResult("8.1-a", "08", "8.1", 1, "passed"),
        CaseResult("8.1-b", "08", "8.1", 2, "failed", "Exercise 8.1 (padding_mask), case 8.1-b:\n  - `mask` differs"),
        CaseResult("8.2-a", "08", "8.2", 1, "not_implemented", "not implemented yet"),
        CaseResult("8.3-a", "08", "8.3", 2, "passed"),
    ])
    text = format_report(run, cases.EXERCISES)
    assert "Checking the notebooks in exercises (chapter 08)" in text
    assert re.search(r"8\.1\s+padding_mask\s+1/3\s+1 of 2 cases pass", text)
    assert re.search(r"8\.2\s+causal_mask\s+0/1\s+not implemented yet", text)
    assert re.search(r"8\.3\s+decoder_self_attention_mask\s+2/2\s+all 1 cases pass", text)
    assert re.search(r"Total\s+3/6", text)
    assert "x 8.1-b" in text and "`mask` differs" in text and "8.2-a" not in text.split("What to fix")[1]
    text.encode("ascii")  # safe on any terminal


def _notebook_with(tmp_path: Path, chapter: str, replacements: dict[str, str]) -> Path:
    """Copy exercises/<chapter> into tmp_path, replacing the stub of each named function by a body."""
    name = cases.NOTEBOOKS[chapter]
    nb = nbformat.read(ROOT / "exercises" / name, as_version=4)
    for cell in nb.cells:
        for function, body in replacements.items():
            if cell.cell_type == "code" and f"def {function}(" in cell.source:
                lines = cell.source.split("\n")
                lines = [ln for ln in lines if "NotImplementedError" not in ln and "Your code here" not in ln]
                cell.source = "\n".join(lines + ["    " + ln for ln in body.split("\n")])
    nbformat.write(nb, tmp_path / name)
    return tmp_path


def test_check_end_to_end_scores_a_partial_answer(tmp_path, capsys):
    folder = _notebook_with(tmp_path, "08", {
        "padding_mask": "if lengths.dim() != 1 or (lengths < 0).any() or (lengths > seq_len).any():\n    raise ValueError('lengths')\n"
                        "return (torch.arange(seq_len)[None, :] >= lengths[:, None])[:, None, None, :]",
        "causal_mask": "k_len = q_len if k_len is None else k_len\nif q_len < 1 or k_len < q_len:\n    raise ValueError('q_len')\n"
                       "return torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)[None, None]",
    })
    points = {ex: sum(c.points for c in cases.CASES if c.exercise == ex) for ex in ("8.1", "8.2", "8.3", "8.4")}
    assert check.main(["8", "--notebooks", str(folder)]) == 0
    out = capsys.readouterr().out
    # only the ValueError case passes, and a rejection alone earns nothing (as in the grader)
    assert re.search(rf"8\.1\s+padding_mask\s+0/{points['8.1']}\s", out), out
    assert "8.1-rejects-bad-lengths" in out, out
    assert re.search(rf"8\.2\s+causal_mask\s+{points['8.2']}/{points['8.2']}\s+all", out), out
    assert re.search(rf"8\.3\s+decoder_self_attention_mask\s+0/{points['8.3']}\s+not implemented yet", out), out
    assert re.search(rf"Total\s+{points['8.2']}/{sum(points.values())}", out), out
    assert "x 8.1-lengths-3-5-2" in out and "Hint:" in out


def test_format_report_keeps_the_exception_line():
    message = ("Exercise 4.1 (scaled_dot_product_attention), case 4.1-a: calling your code raised NameError\n"
               "  code cell 2, line 5, in scaled_dot_product_attention\n  Hint: h\n"
               "  Your code's error text (quoted, hidden characters escaped; at most 1200 characters shown):\n"
               "  | NameError: name 'NEG' is not defined")
    run = CheckRun(notebooks=ROOT / "exercises", chapters=["04"],
                   results=[CaseResult("4.1-a", "04", "4.1", 2, "failed", message)])
    text = format_report(run, cases.EXERCISES)
    assert "calling your code raised NameError\n" in text and "| NameError: name 'NEG' is not defined" in text
    assert "Exercise 4.1 (scaled_dot_product_attention), case 4.1-a" not in text  # the heading only


def test_check_reports_a_top_level_constant_and_delegation(tmp_path, capsys):
    folder = _notebook_with(tmp_path, "04", {
        "scaled_dot_product_attention": "return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask), NEG",
    })
    path = folder / cases.NOTEBOOKS["04"]
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(1, nbformat.v4.new_code_cell("NEG = torch.finfo(torch.float32).min"))
    nbformat.write(nb, path)
    (folder / "04_attention-Copy1.ipynb").write_text("{}")
    assert check.main(["04_attention-Copy1.ipynb", "--notebooks", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "calling your code raised NameError\n" in out and "| NameError: name 'NEG' is not defined" in out, out
    assert "code cell 3, line" in out and "LITERAL constants" in out, out
    assert re.search(r"4\.1 \(scaled_dot_product_attention\): scaled_dot_product_attention uses\s+"
                     r"torch\.nn\.functional\.scaled_dot_product_attention \(code\s+cell 3\)", out), out
    assert "grader flags this" in out
    assert "you named 04_attention-Copy1.ipynb" in out and "04_attention-Copy1.ipynb lies beside 04_attention.ipynb" in out


def test_check_stops_an_endless_loop_per_case(tmp_path, capsys):
    folder = _notebook_with(tmp_path, "10", {"greedy_decode": "while True:\n    pass"})
    assert check.main(["10", "--notebooks", str(folder), "--case-timeout", "1"]) == 0
    out = capsys.readouterr().out
    assert "did not finish within the time limit (1 s)" in out, out
    assert re.search(r"10\.1\s+greedy_decode\s+0/\d+\s+0 of \d+ cases pass; did not finish", out), out
    assert re.search(r"10\.2\s+beam_search\s+0/\d+\s+not implemented yet", out), out  # the run went on
    assert "Problem:" not in out


def test_check_kill_keeps_the_finished_cases(tmp_path, capsys):
    # The loop swallows the per-case alarm, so only the kill of the whole run stops it.
    folder = _notebook_with(tmp_path, "04", {
        "self_attention": "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass",
    })
    nb_path = folder / cases.NOTEBOOKS["04"]
    solution = nbformat.read(ROOT / "solutions" / cases.NOTEBOOKS["04"], as_version=4)
    nb = nbformat.read(nb_path, as_version=4)
    for mine, theirs in zip(nb.cells, solution.cells):
        if mine.cell_type == "code" and "def scaled_dot_product_attention(" in mine.source:
            mine.source = theirs.source
    nbformat.write(nb, nb_path)
    points = {ex: sum(c.points for c in cases.CASES if c.exercise == ex) for ex in ("4.1", "4.2")}
    assert check.main(["04", "--notebooks", str(folder), "--case-timeout", "1", "--timeout", "30"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"4\.1\s+scaled_dot_product_attention\s+{points['4.1']}/{points['4.1']}\s+all", out), out
    assert re.search(rf"4\.2\s+self_attention\s+0/{points['4.2']}\s", out), out
    assert "did not finish within the time limit (endless loop?)" in out and "did not finish within 30 s" in out, out


def test_usage_errors_exit_2(tmp_path, capsys):
    assert check.main(["14"]) == 2
    assert "unknown chapter" in capsys.readouterr().err
    assert check.main(["--notebooks", str(tmp_path / "nowhere")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_split_targets_folder_or_chapter(tmp_path, monkeypatch):
    for name in ("answers", "04", "04_attention"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path)
    chapters, folders = check.split_targets(["answers", "04", "5", "ch6", "04/", "04_attention", "07_x.ipynb"])
    assert chapters == ["04", "5", "ch6", "07_x.ipynb"]  # a bare chapter number stays a chapter
    assert folders == ["answers", "04/", "04_attention"]
    assert default_notebooks(tmp_path, cases.NOTEBOOKS) is None


def test_clone_root_from_the_package_or_the_current_folder(tmp_path, monkeypatch):
    assert check.clone_root() == ROOT  # this package lies in the clone (pip install -e .)
    clone = tmp_path / "clone"
    for sub in ("course_lib", "solutions", "exercises", "my/notebooks"):
        (clone / sub).mkdir(parents=True)
    (clone / "course_lib" / "__init__.py").write_text("")
    # an installed package: found from the current folder (or one above it) only
    monkeypatch.setattr(check, "__file__", str(tmp_path / "site-packages" / "course_lib" / "check.py"))
    assert check.clone_root(clone / "my" / "notebooks") == clone
    assert check.clone_root(tmp_path) is None
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="name the folder"):
        check.repository_root()


def test_a_folder_argument_checks_that_folder(tmp_path, capsys):
    folder = _notebook_with(tmp_path, "08", {
        "causal_mask": "k_len = q_len if k_len is None else k_len\nif q_len < 1 or k_len < q_len:\n    raise ValueError('q_len')\n"
                       "return torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)[None, None]",
    })
    assert check.main([str(folder), "8"]) == 0
    by_argument = capsys.readouterr().out
    assert check.main(["8", "--notebooks", str(folder)]) == 0
    assert capsys.readouterr().out == by_argument
    points = sum(c.points for c in cases.CASES if c.exercise == "8.2")
    assert re.search(rf"8\.2\s+causal_mask\s+{points}/{points}\s+all", by_argument), by_argument
    assert f"Checking the notebooks in {folder} (chapter 08)" in by_argument


def test_outside_a_clone_a_folder_must_be_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(check, "clone_root", lambda cwd=None: None)
    monkeypatch.chdir(tmp_path)
    assert check.main(["8"]) == 2
    err = capsys.readouterr().err
    assert "in the current folder" in err and "my_notebooks/" in err, err
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert check.main(["a", "b"]) == 2
    assert "name one folder of notebooks, not 2" in capsys.readouterr().err
    assert check.main(["a", "--notebooks", "b"]) == 2
    assert "name one folder" in capsys.readouterr().err


def test_check_runner_needs_no_pytest(tmp_path):
    """The check command's child runs from an installed package without pytest (a dev dependency only)."""
    import json
    import os
    import subprocess
    import sys

    code = ("import sys; sys.modules['pytest'] = None; sys.modules['_pytest'] = None\n"
            "from course_exercises.check_runner import main\n"
            "sys.exit(main(sys.argv[1:]))")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    for folder, flags, kind in ((ROOT / "solutions", [], "passed"),
                                (ROOT / "exercises", ["--expect-stubs"], "not_implemented")):
        results = tmp_path / f"{folder.name}.jsonl"
        proc = subprocess.run([sys.executable, "-c", code, "--notebooks", str(folder), "--results", str(results),
                               "--chapter", "08", *flags], capture_output=True, text=True, cwd=tmp_path, env=env,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        records = [json.loads(line) for line in results.read_text().splitlines()]
        assert [r for r in records if "notebook" in r] == [{"notebook": "08", "status": "ok", "problem": "",
                                                             "notes": []}]
        done = [r for r in records if "notebook" not in r and r["kind"] != "started"]
        assert [r["id"] for r in done] == [c.id for c in cases.cases_for(["08"])]
        assert {r["kind"] for r in done} == {kind}, [r for r in done if r["kind"] != kind][:2]


def test_a_missing_folder_is_not_called_an_unknown_chapter(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for arg in ("nosuchdir", "no/such/dir"):
        assert check.main([arg]) == 2
        err = capsys.readouterr().err
        assert f"error: no such folder or chapter: {arg!r}" in err and "unknown chapter" not in err, err
        assert ", ".join(cases.NOTEBOOKS) in err and "Traceback" not in err, err
    assert check.main(["14"]) == 2  # a chapter number stays a chapter
    assert "unknown chapter '14'" in capsys.readouterr().err


def test_a_folder_without_notebooks_stops_at_once(tmp_path, capsys):
    empty = tmp_path / "emptydir"
    empty.mkdir()
    assert check.main([str(empty)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip().splitlines() == [err.strip()], err
    assert err.startswith(f"error: no exercise notebooks (NN_*.ipynb) in {empty}"), err
    (empty / "04_attention-Copy1.ipynb").write_text("{}")  # a copy only: said, not checked
    assert check.main([str(empty), "04"]) == 2
    assert "no exercise notebooks (NN_*.ipynb)" in capsys.readouterr().err
    (empty / cases.NOTEBOOKS["08"]).write_text("{}")  # the chapters asked for are not there
    assert check.main([str(empty), "04", "06"]) == 2
    err = capsys.readouterr().err
    assert "no notebook of chapters 04, 06" in err and cases.NOTEBOOKS["06"] in err, err


def test_a_missing_notebook_is_reported_once(tmp_path, capsys):
    folder = _notebook_with(tmp_path, "08", {})
    assert check.main([str(folder), "06", "08"]) == 0
    out = capsys.readouterr().out
    name = cases.NOTEBOOKS["06"]
    assert [line for line in out.splitlines() if name in line] == [
        f"  ! {name} (chapter 06) is not in {folder}: save your notebook there under its original name ({name})"], out
    assert re.search(r"6\.1\s+position_wise_ffn\s+0/\d+\s+notebook not found", out), out
    assert re.search(r"8\.1\s+padding_mask\s+0/\d+\s+not implemented yet", out), out
    assert "not found (no such file)" not in out and "x 6.1" not in out, out
    run = check.run_checks(["06"], tmp_path)  # nothing to run: no child started
    assert run.missing == {"06": name} and {r.kind for r in run.results} == {"missing"} and not run.problem


@pytest.mark.parametrize("argv0, shown", [("/venv/bin/course-check", "course-check"),
                                          ("/repo/course_exercises/check.py", "python -m course_exercises.check")])
def test_version_and_usage_show_the_name_typed(monkeypatch, capsys, argv0, shown):
    import sys

    import course_lib

    monkeypatch.setattr(sys, "argv", [argv0])
    with pytest.raises(SystemExit):
        check.main(["--version"])
    assert capsys.readouterr().out.strip() == f"{shown} {course_lib.__version__}"
    assert check.main(["14"]) == 2
    assert capsys.readouterr().err.startswith(f"usage: {shown} ")


def test_the_books_chapter_is_not_taken_for_the_exercise_notebook(monkeypatch, capsys):
    """In book/, 08_masks.ipynb is the chapter: the check stops and says so instead of grading the chapter."""
    monkeypatch.chdir(ROOT / "book")
    assert check.main(["08"]) == 2
    err = capsys.readouterr().err
    assert "not exercise notebooks" in err and "exercises/" in err, err
    assert check.is_exercise_notebook(ROOT / "exercises" / cases.NOTEBOOKS["05"], check.chapter_functions(cases.EXERCISES, "05"))
    assert not check.is_exercise_notebook(ROOT / "book" / cases.NOTEBOOKS["05"], check.chapter_functions(cases.EXERCISES, "05"))


def test_a_held_pass_is_one_line_after_the_real_failures(tmp_path, capsys):
    """Fixed-input passes that wait for a drawn case are not shown as failures and never hide the real one:
    an off-by-one prefix (j <= p) passes some hand-worked cases of 8.4 but no drawn one."""
    folder = _notebook_with(tmp_path, "08", {
        "prefix_lm_mask": ("batch, length = tokens.shape\n"
                           "if tuple(prefix_lengths.shape) != (batch,) or bool((prefix_lengths < 0).any()) "
                           "or bool((prefix_lengths > length).any()):\n    raise ValueError('prefix_lengths')\n"
                           "j = torch.arange(length)\n"
                           "in_prefix = (j[None, :] <= prefix_lengths[:, None])[:, None, None, :]  # off by one\n"
                           "causal = (j[None, :] <= j[:, None])[None, None]\n"
                           "return (tokens != pad_id)[:, None, None, :] & (in_prefix | causal)"),
    })
    assert check.main(["8", "--notebooks", str(folder)]) == 0
    out = capsys.readouterr().out
    fix = out.split("What to fix:")[1].split("Exercise 8.4")[1]
    real, _, held = fix.partition("\n  ~ ")
    assert "x 8.4-" in real and "8.4-drawn-tokens" in real and "inputs are fixed" not in real, fix
    assert "earn their points only once a case with drawn inputs" in held and "inputs are fixed" in held, fix


def test_held_passes_say_their_reason_and_the_last_line_names_the_flags():
    """Issue 22, item 5: each "~" line says which reason holds its cases; the drawn inputs are explained under
    "What to fix"; a flag the grader will raise is the last line, also when every case passes."""
    from course_exercises.compare import FIXED_ALONE, REJECTION_ALONE

    results = [CaseResult("8.1-a", "08", "8.1", 2, "failed", "Exercise 8.1 (padding_mask), case 8.1-a: wrong"),
               CaseResult("8.1-rejects-x", "08", "8.1", 1, "held", f"{REJECTION_ALONE}."),
               CaseResult("8.1-table", "08", "8.1", 1, "held", f"{FIXED_ALONE}.")]
    text = format_report(CheckRun(notebooks=ROOT / "exercises", chapters=["08"], results=results), cases.EXERCISES)
    assert re.search(r"~ 1 case passes but earns its points .* because it is a rejection case \(8\.1-rejects-x\)",
                     text), text
    assert re.search(r"~ 1 case passes but earns its points .* because it is a case with fixed inputs \(8\.1-table\)",
                     text), text
    assert "case(s)" not in text and "because each is" not in text, text
    two = results + [CaseResult("8.1-rejects-y", "08", "8.1", 1, "held", f"{REJECTION_ALONE}.")]
    text2 = format_report(CheckRun(notebooks=ROOT / "exercises", chapters=["08"], results=two), cases.EXERCISES)
    assert re.search(r"~ 2 cases pass but earn their points .* because each is a rejection case "
                     r"\(8\.1-rejects-x, 8\.1-rejects-y\)", text2), text2
    assert "draws new inputs" in text and "a right answer earns the same points in both" in text
    flag = ("8.2 (causal_mask): uses torch.tril. The exercise asks you to write this yourself: your instructor's "
            "grader flags this for review.")
    run = CheckRun(notebooks=ROOT / "exercises", chapters=["08"], warnings=[flag],
                   results=[CaseResult("8.2-a", "08", "8.2", 2, "passed", "")])
    text = format_report(run, cases.EXERCISES)
    assert "Everything passes" in text and "will flag 1 thing(s) above for review" in text.strip().split("\n")[-1]


def test_an_exercise_defined_twice_gets_a_note(tmp_path):
    """Issue 22, item 5: an exercise function defined in two cells is said, with the cell that counts (the later);
    the grader's inspection records the same note for feedback.md."""
    from course_grader.inspect_notebooks import inspect_notebooks

    folder = _notebook_with(tmp_path, "08", {"causal_mask": "return None"})
    path = folder / cases.NOTEBOOKS["08"]
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("def causal_mask(q_len, k_len=None):\n    return 'later'"))
    nbformat.write(nb, path)
    last = sum(c.cell_type == "code" for c in nb.cells)
    warnings = check.static_warnings(["08"], folder, cases)
    twice = [w for w in warnings if w.startswith("8.2 (causal_mask): causal_mask is defined in code cell")]
    assert len(twice) == 1 and f"the later one (code cell {last}) is the one checked and graded" in twice[0], warnings
    found = inspect_notebooks({"08": path}, {"08": {"8.1": "padding_mask", "8.2": "causal_mask"}})
    assert list(found["08"].notes) == ["8.2"] and f"(code cell {last})" in found["08"].notes["8.2"]


def test_the_old_module_name_forwards_to_the_checker(tmp_path):
    """``python -m course_lib.check`` (the last cell of notebooks saved from earlier versions) runs this command."""
    import subprocess
    import sys

    import course_lib

    proc = subprocess.run([sys.executable, "-m", "course_lib.check", "--version"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == f"python -m course_exercises.check {course_lib.__version__}", \
        (proc.stdout, proc.stderr)
    from course_lib import check as old

    assert old.load_cases is check.load_cases and old.main is check.main  # old imports keep working

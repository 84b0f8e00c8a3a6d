"""Tests of course_exercises.extract, and of the committed notebooks' shape.

Notebooks are written with nbformat into pytest's ``tmp_path``; each test checks
one promise of ``extract_source`` / ``load_namespace``.
"""

from __future__ import annotations

import ast
import builtins
import json
import math
import re
import sys
from pathlib import Path

import nbformat
import pytest

from course_exercises.check import load_cases
from course_exercises import extract
from course_exercises.extract import SubmissionError, extract_source, load_namespace, load_submission

ROOT = Path(__file__).resolve().parents[2]
cases = load_cases()


def make_notebook(path: Path, *cells: str | tuple[str, str]) -> Path:
    """Write a notebook: plain strings are code cells, ("md", text) markdown cells."""
    nb = nbformat.v4.new_notebook()
    for cell in cells:
        if isinstance(cell, tuple):
            nb.cells.append(nbformat.v4.new_markdown_cell(cell[1]))
        else:
            nb.cells.append(nbformat.v4.new_code_cell(cell))
    nbformat.write(nb, path)
    return path


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------
def test_submission_error_is_a_value_error():
    assert issubclass(SubmissionError, ValueError)


def test_missing_notebook(tmp_path):
    with pytest.raises(SubmissionError, match=r"not found.*04_attention\.ipynb") as info:
        load_namespace(tmp_path / "04_attention.ipynb")
    assert info.value.status == "missing"
    with pytest.raises(SubmissionError, match="directory"):
        extract_source(tmp_path)


def test_invalid_json(tmp_path):
    path = tmp_path / "nb.ipynb"
    path.write_text('{"cells": [', encoding="utf-8")
    with pytest.raises(SubmissionError, match="not valid JSON") as info:
        extract_source(path)
    assert info.value.status == "unreadable"


@pytest.mark.parametrize("content", [[1, 2], {"nbformat": 4}, {"cells": "x"}, {"cells": [], "nbformat": 3}, {"cells": [7]}])
def test_json_that_is_not_a_notebook(tmp_path, content):
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(content), encoding="utf-8")
    with pytest.raises(SubmissionError, match="notebook|cell"):
        extract_source(path)


def test_a_cell_with_a_syntax_error_is_skipped_with_one_note(tmp_path):
    path = make_notebook(tmp_path / "nb.ipynb", ("md", "# title"), "import math", "x = 1\ndef f(:\n    pass",
                         "def g():\n    return math.pi")
    ns, skipped = load_submission(path)
    assert ns.g() == math.pi and not hasattr(ns, "x")  # the rest is graded; the broken cell's names are not
    assert [(s.cell, s.reason) for s in skipped] == [(3, "syntax")]
    message = skipped[0].message
    assert "cell 3" in message and "line 2" in message and "def f(:" in message and "skipped" in message
    assert "def f(" not in extract_source(path) and "def g(" in extract_source(path)


def test_compile_time_error_in_a_demo_statement_skips_the_cell(tmp_path):
    # Jupyter would refuse the cell too ('return' outside function).
    path = make_notebook(tmp_path / "nb.ipynb", "def f():\n    return 1\nreturn 2", "def h():\n    return 3")
    ns, skipped = load_submission(path)
    assert not hasattr(ns, "f") and ns.h() == 3
    assert [s.cell for s in skipped] == [1] and "'return' outside function" in skipped[0].message


def test_missing_required_name(tmp_path):
    path = make_notebook(tmp_path / "nb.ipynb", "def helper():\n    return 1")
    with pytest.raises(SubmissionError, match=r"does not define 'split_heads', 'merge_heads'") as info:
        load_namespace(path, required=("helper", "split_heads", "merge_heads"))
    assert info.value.status == "incomplete"


def test_a_cell_whose_definitions_raise_loses_only_its_definitions(tmp_path):
    path = make_notebook(tmp_path / "nb.ipynb", "import math\ndef f():\n    return 1",
                         "def f():\n    return 2\nimport no_such_module_for_sure", "import sys\ndef _x(_=sys.exit(0)):\n    pass",
                         "def g():\n    return f() + 10")
    ns, skipped = load_submission(path)
    assert ns.g() == 11  # cell 2's f is lost, cell 1's comes back
    assert not hasattr(ns, "no_such_module_for_sure") and not hasattr(ns, "_x")
    assert [(s.cell, s.reason) for s in skipped] == [(2, "raised"), (3, "raised")]
    assert re.search(r"ModuleNotFoundError.*cell 2, line 3", skipped[0].message), skipped[0].message
    assert "(f, no_such_module_for_sure)" in skipped[0].message and "SystemExit" in skipped[1].message


# ---------------------------------------------------------------------------
# What is kept and what is not
# ---------------------------------------------------------------------------
def test_demo_statements_are_not_executed(tmp_path):
    path = make_notebook(
        tmp_path / "nb.ipynb",
        "import math\nD_MODEL = 8\nNAMES = ('a', 'b')\nPAD, BOS = 0, 1\nstate = []\nresult = math.sqrt(D_MODEL)",
        "def f(x):\n    # a comment inside\n    return x + D_MODEL\nprint('demo ran')\nraise RuntimeError('demo ran')",
        "state.append(1)\nf(1)",
        "class C:\n    size: int = 3\n\nC()",
    )
    source = extract_source(path)
    assert "print(" not in source and "raise RuntimeError" not in source and "result =" not in source
    assert "state.append" not in source and "# a comment inside" in source
    ns = load_namespace(path, required=("f", "C"))
    assert ns.f(1) == 9 and ns.C.size == 3 and ns.NAMES == ("a", "b") and (ns.PAD, ns.BOS) == (0, 1)
    assert not hasattr(ns, "result") and ns.state == []  # a literal is kept; the demo that appends is not run


def test_magics_and_shell_commands_are_skipped(tmp_path):
    path = make_notebook(
        tmp_path / "nb.ipynb",
        "!pip install nothing-at-all\n%matplotlib inline\nimport math",
        "%%bash\necho this is not python",
        "files = !ls\ndef g(x):\n    %time y = x\n    return x * 2",
        "%%time\ndef h():\n    return 3",
        "g?",
    )
    source = extract_source(path)
    assert "pip" not in source and "echo" not in source and "files" not in source
    ns = load_namespace(path, required=("g", "h", "math"))
    assert ns.h() == 3


def test_magics_fallback_without_ipython(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_ipython(name, *args, **kwargs):
        if name.startswith("IPython"):
            raise ImportError("no IPython here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ipython)
    monkeypatch.delitem(sys.modules, "IPython.core.inputtransformer2", raising=False)
    path = make_notebook(
        tmp_path / "nb.ipynb",
        "!pip install nothing\n%matplotlib inline\nimport math",
        "%%bash\necho hi",
        "files = !ls\ndef g(x):\n    %time y = x\n    return x * 2",
    )
    ns = load_namespace(path, required=("g",))
    assert ns.g(2) == 4


def test_future_import_is_moved_to_the_top(tmp_path):
    path = make_notebook(
        tmp_path / "nb.ipynb",
        "import math",
        "from __future__ import annotations\nfrom dataclasses import dataclass\n@dataclass\nclass Config:\n    d_model: int = 8",
    )
    source = extract_source(path)
    body = [line for line in source.splitlines() if line and not line.startswith("#")]
    assert body[0] == "from __future__ import annotations"
    assert load_namespace(path).Config().d_model == 8


def test_statements_on_one_line(tmp_path):
    path = make_notebook(tmp_path / "nb.ipynb", "import math; print('demo')\nX = 2; Y = math.pi")
    source = extract_source(path)
    assert "print" not in source and "Y" not in source
    assert load_namespace(path).X == 2


def test_extracted_source_is_valid_python_with_cell_markers(tmp_path):
    path = make_notebook(tmp_path / "nb.ipynb", ("md", "text"), "import math", "def f():\n    return math.e")
    source = extract_source(path)
    ast.parse(source)
    assert "# --- cell 2 ---" in source and "# --- cell 3 ---" in source


def test_tracebacks_show_the_students_lines(tmp_path):
    path = make_notebook(tmp_path / "nb.ipynb", "def broken(x):\n    return x.no_such_attribute")
    ns = load_namespace(path)
    with pytest.raises(AttributeError) as info:
        ns.broken(1)
    assert any("no_such_attribute" in (entry.statement and str(entry.statement) or "") for entry in info.traceback)


def test_later_definition_wins_like_in_jupyter(tmp_path):
    path = make_notebook(tmp_path / "nb.ipynb", "def f():\n    return 1", "def f():\n    return 2")
    assert load_namespace(path).f() == 2


def test_module_is_not_left_in_sys_modules(tmp_path):
    path = make_notebook(tmp_path / "nb_x.ipynb", "import math")
    load_namespace(path)
    assert "submission_nb_x" not in sys.modules


# ---------------------------------------------------------------------------
# The committed notebooks
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("chapter", list(cases.NOTEBOOKS))
def test_stub_notebooks_define_every_exercise_and_no_demo(chapter):
    name = cases.NOTEBOOKS[chapter]
    functions = [f for ex, f in cases.EXERCISES.items() if f"{int(ex.split('.')[0]):02d}" == chapter]
    ns = load_namespace(ROOT / "exercises" / name, required=functions)
    for ex, function in cases.EXERCISES.items():
        if function in functions:
            with pytest.raises(NotImplementedError, match=f"Exercise {ex}:"):
                _call_stub(getattr(ns, function))
    source = extract_source(ROOT / "exercises" / name)
    assert "-m course_exercises.check" not in source  # the check cell (a shell command) is not graded


def _call_stub(fn):
    import inspect

    n_required = sum(1 for p in inspect.signature(fn).parameters.values() if p.default is inspect.Parameter.empty)
    return fn(*([None] * n_required))


@pytest.mark.parametrize("chapter", list(cases.NOTEBOOKS))
def test_notebooks_match_their_sources(chapter):
    """exercises/ and solutions/ are built from exercise_sources/chNN.py (exercise_sources/build_notebooks.py)."""
    import runpy

    builder = runpy.run_path(str(ROOT / "exercise_sources" / "build_notebooks.py"))
    ex_nb, sol_nb, name = builder["build"](chapter)
    assert name == cases.NOTEBOOKS[chapter]
    for built, folder in ((ex_nb, "exercises"), (sol_nb, "solutions")):
        committed = nbformat.read(ROOT / folder / name, as_version=4)
        got = [(c.cell_type, c.source, c.get("metadata", {}).get("tags", [])) for c in committed.cells]
        want = [(c.cell_type, c.source, c.get("metadata", {}).get("tags", [])) for c in built.cells]
        assert got == want, f"{folder}/{name} differs from its source: run python exercise_sources/build_notebooks.py {chapter}"
    assert all(not c.get("outputs") for c in nbformat.read(ROOT / "exercises" / name, as_version=4).cells if c.cell_type == "code")
    solved = nbformat.read(ROOT / "solutions" / name, as_version=4)
    assert all(c.execution_count for c in solved.cells if c.cell_type == "code"), f"solutions/{name} is not executed"
    errors = [o for c in solved.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, f"solutions/{name} has error outputs"
    # The stored output of the check cell must show the current full score (rebuild after editing the cases).
    check_output = "".join(o.get("text", "") for o in solved.cells[-1].outputs)
    total = sum(c.points for c in cases.CASES if c.chapter == chapter)
    assert re.search(rf"Total\s+{total}/{total}\s", check_output), f"solutions/{name}: stale check output; rebuild it"


def test_shell_assignment_fallback_regex():
    assert extract._strip_magics_fallback("x = !ls\ny = 1") == "pass\ny = 1"
    assert extract._strip_magics_fallback("  %time f()") == "  pass"
    assert extract._strip_magics_fallback("%%bash\necho\n") == "\n\n"

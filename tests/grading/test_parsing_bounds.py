"""The grader's parent spends bounded time and memory on any notebook, and one bad notebook costs one chapter.

Each test here is one problem seen with hostile notebooks: IPython's
translation being quadratic in a cell of magics, deeply nested JSON raising
``RecursionError``, the parent re-reading notebook JSON for cell numbers,
delegation to a built-in through imports and aliases going unflagged. The
notebooks are written into pytest's ``tmp_path``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from course_exercises import extract
from course_exercises.extract import SubmissionError, code_cell_numbers, extract_source, rename_cells
from course_exercises.static_checks import check_source
from course_exercises.casefile import CASES_FILE

ROOT = Path(__file__).resolve().parents[2]
ADVISORY = "flagged for review; the grader's guarantee is the sandbox, not this check"
EXERCISES = dict(re.findall(r'"(\d+\.\d+)": "(\w+)"', CASES_FILE.read_text()))


def exercises_of(chapter: str) -> dict[str, str]:
    return {e: f for e, f in EXERCISES.items() if f"{int(e.split('.')[0]):02d}" == chapter}


def make_notebook(path: Path, *cells: str | tuple[str, str], metadata: dict | None = None) -> Path:
    """Write an nbformat-4 notebook: plain strings are code cells, ("md", text) markdown cells.

    Written as JSON directly: nbformat's validation takes seconds on the large notebooks here.
    """
    def cell(i: int, c: str | tuple[str, str]) -> dict:
        if isinstance(c, tuple):
            return {"cell_type": "markdown", "id": f"c{i}", "metadata": {}, "source": c[1]}
        return {"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
                "source": c}

    nb = {"cells": [cell(i, c) for i, c in enumerate(cells)], "metadata": metadata or {}, "nbformat": 4,
          "nbformat_minor": 5}
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def magic_cell(size: int) -> str:
    """A cell of ``size`` characters of shell commands and line magics, then a definition."""
    pair = "!echo x\n%time f()\n"
    return pair * (size // len(pair) + 1) + "def gelu(x):\n    return x\n"


def deep_notebook(path: Path, depth: int = 100_000) -> Path:
    """A notebook whose metadata nests ``depth`` lists (valid JSON, but not what Jupyter writes)."""
    text = json.dumps({"cells": [], "metadata": {"x": "DEEP"}, "nbformat": 4, "nbformat_minor": 5})
    path.write_text(text.replace('"DEEP"', "[" * depth + "]" * depth), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------
# IPython's translation is bounded (old code: 359 s for a 169 KB cell)
# ---------------------------------------------------------------------------
def timed_extract(path: Path) -> float:
    """Seconds ``extract_source(path)`` takes, in a subprocess: a regression fails at the timeout, not after hours."""
    code = ("import sys, time\nimport IPython.core.inputtransformer2\n"
            "from course_exercises.extract import extract_source\n"
            "t = time.perf_counter(); source = extract_source(sys.argv[1])\n"
            "print(time.perf_counter() - t, 'def gelu' in source)")
    out = subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert out[1] == "True", out
    return float(out[0])


def test_cell_full_of_magics_translates_in_linear_time(tmp_path):
    path = make_notebook(tmp_path / "06_feed_forward.ipynb", magic_cell(150_000))
    assert timed_extract(path) < 1.5  # about 0.3 s; the old code took 359 s


def test_notebook_allowance_bounds_many_magic_cells(tmp_path):
    cell = "\n".join(["!echo x"] * 20 + ["# " + "c" * 30] * 60)  # each cell just under the per-cell limit
    path = make_notebook(tmp_path / "06_feed_forward.ipynb", *[cell] * 1000, "def gelu(x):\n    return x")
    assert timed_extract(path) < 3  # about 0.6 s; the old code took 17 s


def test_honest_magics_still_use_ipython():
    assert extract._to_python("files = !ls\ndef g(x):\n    %time y = x\n    return x") == (
        "files = get_ipython().getoutput('ls')\ndef g(x):\n"
        "    get_ipython().run_line_magic('time', 'y = x')\n    return x\n")


def test_fallback_rules_are_linear_on_long_blank_lines():
    start = time.perf_counter()
    assert extract._strip_magics_fallback(" " * 60_000 + "x") == " " * 60_000 + "x"
    assert time.perf_counter() - start < 0.5  # old regex: about 60 s


# ---------------------------------------------------------------------------
# Hostile JSON is a SubmissionError for that notebook only (old code: RecursionError, ValueError)
# ---------------------------------------------------------------------------
def test_deeply_nested_metadata_is_a_submission_error(tmp_path):
    with pytest.raises(SubmissionError, match="cannot be read"):
        extract_source(deep_notebook(tmp_path / "04_attention.ipynb"))


def test_cell_numbering_of_a_deep_notebook_is_empty(tmp_path):
    path = deep_notebook(tmp_path / "04_attention.ipynb")
    assert code_cell_numbers(path) == {}
    assert rename_cells("cell 3, line 2", path) == "cell 3, line 2"


def test_oversized_number_is_a_submission_error(tmp_path):
    path = tmp_path / "nb.ipynb"
    path.write_text('{"cells": [], "nbformat": 4, "metadata": {"n": ' + "7" * 5000 + "}}", encoding="utf-8")
    with pytest.raises(SubmissionError):
        extract_source(path)


def test_oversized_notebook_is_refused_before_parsing(tmp_path):
    path = make_notebook(tmp_path / "nb.ipynb", "import math", metadata={"pad": "x" * extract.MAX_NOTEBOOK_BYTES})
    with pytest.raises(SubmissionError, match="larger than"):
        extract_source(path)


def test_rename_cells_survives_huge_numbers(tmp_path):
    path = make_notebook(tmp_path / "nb.ipynb", ("md", "intro"), "import math")
    text = "cell " + "9" * 5000 + " and cell 2"
    assert rename_cells(text, path) == "cell " + "9" * 5000 + " and code cell 1"  # old code: ValueError


def test_rename_cells_with_a_mapping_reads_no_file():
    from course_exercises.extract import rename_cells_with

    assert rename_cells_with("cell 4, line 2; code cell 1; cell 9", {4: 2}) == "code cell 2, line 2; code cell 1; cell 9"
    assert rename_cells_with("cell 4", {}) == "cell 4"


# ---------------------------------------------------------------------------
# The inspector: one bounded subprocess for all of the parent's parsing
# ---------------------------------------------------------------------------
@pytest.fixture()
def inspect():
    from course_grader.inspect_notebooks import inspect_notebooks

    return inspect_notebooks


def test_inspector_gives_flags_numbers_and_errors_per_chapter(tmp_path, inspect):
    good = make_notebook(tmp_path / "06_feed_forward.ipynb", ("md", "intro"), "import torch.nn.functional as F",
                         ("md", "exercise"), "def gelu(x):\n    return F.gelu(x)")
    deep = deep_notebook(tmp_path / "04_attention.ipynb")
    found = inspect({"04": deep, "06": good, "08": tmp_path / "missing.ipynb"},
                    {"04": exercises_of("04"), "06": exercises_of("06"), "08": exercises_of("08")})
    assert list(found) == ["04", "06", "08"]
    assert "cannot be read" in found["04"].error and found["04"].flags == [] and found["04"].cell_numbers == {}
    assert found["06"].error is None and found["06"].cell_numbers == {2: 1, 4: 2}
    [flag] = found["06"].flags
    assert flag.startswith("delegates 6.2: gelu uses torch.nn.functional.gelu (code cell 2)") and ADVISORY in flag
    assert "not found" in found["08"].error


def test_inspector_matches_the_in_process_checks_on_the_course_notebooks(tmp_path, inspect):
    books = {p.name[:2]: p for p in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))}
    if not books:
        pytest.skip("notebooks not built")
    found = inspect(books, {ch: exercises_of(ch) for ch in books})
    for ch, book in books.items():
        assert found[ch].flags == [] and found[ch].error is None, ch
        assert found[ch].cell_numbers == code_cell_numbers(book), ch


def test_inspector_parses_nothing_in_the_parent(tmp_path, inspect, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the parent read a notebook")

    monkeypatch.setattr(extract, "read_notebook", refuse)
    monkeypatch.setattr(extract, "extract_source", refuse)
    path = make_notebook(tmp_path / "08_masks.ipynb", "import course_lib.masks as m",
                         "def causal_mask(n):\n    return m.causal_mask(n)")
    found = inspect({"08": path}, {"08": exercises_of("08")})
    assert any("course_lib.masks.causal_mask" in f for f in found["08"].flags)


def test_inspector_timeout_gives_flags_not_a_hang(tmp_path, inspect):
    path = make_notebook(tmp_path / "06_feed_forward.ipynb", "import math")
    start = time.monotonic()
    found = inspect({"06": path, "07": path}, {"06": {}, "07": {}}, timeout_s=0.05)
    assert time.monotonic() - start < 5
    for ch in ("06", "07"):
        [flag] = found[ch].flags
        assert "could not be inspected within 0.05 s" in flag and ADVISORY in flag and found[ch].cell_numbers == {}


def test_a_slow_chapter_costs_only_its_own_inspection(tmp_path, inspect):
    slow = make_notebook(tmp_path / "06_feed_forward.ipynb", *[magic_cell(300_000)] * 40)  # ~12 MB: well over 4 s to parse, also on a fast machine
    fast = make_notebook(tmp_path / "08_masks.ipynb", ("md", "intro"), "def causal_mask(n):\n    return n")
    start = time.monotonic()
    found = inspect({"06": slow, "08": fast}, {"06": exercises_of("06"), "08": exercises_of("08")}, timeout_s=4)
    assert time.monotonic() - start < 8
    [flag] = found["06"].flags
    assert "could not be inspected within" in flag and "its share" in flag
    assert found["08"].flags == [] and found["08"].cell_numbers == {2: 1}


def test_inspector_crash_marks_every_chapter(tmp_path, inspect, monkeypatch):
    from course_grader import inspect_notebooks as inspector

    path = make_notebook(tmp_path / "06_feed_forward.ipynb", "import math")
    monkeypatch.setattr(inspector, "_BOOTSTRAP", "import os; os._exit(3)")
    found = inspect({"06": path, "07": path}, {"06": {}, "07": {}})
    for ch in ("06", "07"):
        [flag] = found[ch].flags
        assert "could not be inspected: the inspector stopped (exit status 3)" in flag and ADVISORY in flag


def test_inspector_memory_limit_costs_flags_only(tmp_path, inspect):
    path = make_notebook(tmp_path / "06_feed_forward.ipynb", "import math")
    found = inspect({"06": path, "07": path}, {"06": {}, "07": {}}, memory_mb=1)
    for ch in ("06", "07"):
        [flag] = found[ch].flags
        assert "memory limit" in flag or "the inspector stopped" in flag


def test_inspector_child_imports_neither_torch_nor_site(tmp_path):
    from course_grader import inspect_notebooks as inspector

    path = make_notebook(tmp_path / "06_feed_forward.ipynb", "/print 1\ndef gelu(x):\n    return x")  # IPython autocall
    request = {"sys_path": inspector._child_sys_path(), "deadline": time.time() + 30, "memory_mb": 1024, "cpu_s": 31,
               "chapters": [{"chapter": "06", "path": str(path), "exercises": {"6.2": "gelu"}}]}
    (tmp_path / "request.json").write_text(json.dumps(request), encoding="utf-8")
    probe = inspector._BOOTSTRAP + "print(sorted(m for m in ('torch', 'site', 'IPython') if m in sys.modules))\n"
    out = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", probe, str(tmp_path / "request.json"),
                          str(tmp_path / "out.jsonl")], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=60, check=True, env={})
    assert out.stdout.strip() == "['IPython']", out
    record = json.loads((tmp_path / "out.jsonl").read_text())
    assert record["error"] is None  # IPython translated the autocall: it was importable in the child


# ---------------------------------------------------------------------------
# Delegation through imports and aliases is flagged (old code: no flag, or only "dynamic")
# ---------------------------------------------------------------------------
DELEGATION = {
    "from-import instead of a def": ("06", "from torch.nn.functional import gelu\n",
                                     "gelu is imported from torch.nn.functional.gelu"),
    "from-import after the def": ("06", "def gelu(x):\n    return x\nfrom torch.nn.functional import gelu\n",
                                  "gelu is imported from torch.nn.functional.gelu"),
    "module alias": ("08", "import course_lib.masks as m\ndef causal_mask(n):\n    return m.causal_mask(n)\n",
                     "uses course_lib.masks.causal_mask"),
    "from package import module": ("08", "from course_lib import masks\ndef causal_mask(n):\n    return masks.causal_mask(n)\n",
                                   "uses course_lib.masks.causal_mask"),
    "F alias": ("06", "import torch.nn.functional as F\ndef gelu(x):\n    return F.gelu(x)\n",
                "uses torch.nn.functional.gelu"),
    "variable alias": ("06", "import torch\ndef gelu(x):\n    fn = torch.nn.functional\n    return fn.gelu(x)\n",
                       "uses torch.nn.functional.gelu"),
    "default-argument alias": ("06", "import torch\ndef gelu(x, fn=torch.nn.functional):\n    return fn.gelu(x)\n",
                               "uses torch.nn.functional.gelu"),
    "sys.modules": ("08", "import sys\ndef causal_mask(n):\n    return sys.modules['course_lib.masks'].causal_mask(n)\n",
                    "uses course_lib.masks.causal_mask"),
    "importlib": ("04", "import importlib\ndef scaled_dot_product_attention(q, k, v, mask=None):\n"
                        "    return importlib.import_module('course_lib.attention').scaled_dot_product_attention(q, k, v)\n",
                  "uses course_lib.attention.scaled_dot_product_attention"),
    "__import__": ("08", "def causal_mask(n):\n    return __import__('course_lib.masks', fromlist=['x']).causal_mask(n)\n",
                   "imports course_lib.masks"),
    "getattr with a built name": ("06", "import torch.nn.functional as F\ndef gelu(x):\n    return getattr(F, 'ge' + 'lu')(x)\n",
                                  "uses torch.nn.functional.gelu"),
    "getattr through a string constant": ("06", "import torch.nn.functional as F\nNAME = 'gelu'\n"
                                                "def gelu(x):\n    g = getattr\n    return g(F, NAME)(x)\n",
                                          "uses torch.nn.functional.gelu"),
    "vars()": ("06", "import torch.nn.functional as F\ndef gelu(x):\n    return vars(F)['gelu'](x)\n",
               "uses torch.nn.functional.gelu"),
    "star import from course_lib": ("08", "from course_lib.masks import *\n", "from course_lib.masks import *"),
    "star import from the torch module": ("06", "from torch.nn.functional import *\ndef gelu(x):\n    return x\n",
                                          "from torch.nn.functional import *"),
}


@pytest.mark.parametrize("name", list(DELEGATION))
def test_delegation_is_flagged(name):
    chapter, source, expected = DELEGATION[name]
    flags = [str(f) for f in check_source(source, chapter, exercises_of(chapter))]
    assert any(f.startswith("delegates") and expected in f for f in flags), flags


def test_flags_say_they_are_advisory():
    source = "import torch.nn.functional as F\ndef gelu(x):\n    return F.gelu(x)\n"
    [flag] = check_source(source, "06", exercises_of("06"))
    assert str(flag) == f"delegates 6.2: gelu uses torch.nn.functional.gelu (the extracted code) - {ADVISORY}"


def test_dynamic_lookups_are_flagged():
    source = "import torch.nn.functional as F\ndef gelu(x):\n    name = x.name\n    return getattr(F, name)(x)\n"
    assert any(str(f).startswith("dynamic 6.2: gelu calls getattr() with a computed name")
               for f in check_source(source, "06", exercises_of("06")))
    source = "import sys\ndef causal_mask(n):\n    return sys.modules[n.name].causal_mask(n)\n"
    assert any("indexes sys.modules" in str(f) for f in check_source(source, "08", exercises_of("08")))


def test_torch_primitives_are_not_flagged():
    source = ("import math\nimport torch\nimport torch.nn.functional as F\n"
              "def scaled_dot_product_attention(q, k, v, mask=None):\n"
              "    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))\n"
              "    weights = torch.softmax(scores, dim=-1)\n    return weights @ v, F.dropout(weights, 0.0)\n")
    assert check_source(source, "04", exercises_of("04")) == []


@pytest.mark.parametrize("folder", ["solutions", "exercises"])
def test_course_notebooks_have_no_flags(folder):
    books = sorted((ROOT / folder).glob("[0-9][0-9]_*.ipynb"))
    if not books:
        pytest.skip("notebooks not built")
    for book in books:
        ch = book.name[:2]
        assert check_source(extract_source(book), ch, exercises_of(ch)) == [], book.name


def test_many_findings_are_capped_and_fast():
    source = "".join(f"P{i} = '/etc/secret{i}'\n" for i in range(20_000))
    start = time.perf_counter()
    flags = check_source(source, "04", exercises_of("04"))
    assert time.perf_counter() - start < 5  # old code: a quadratic de-duplication
    assert len(flags) == 31 and flags[-1].code == "more" and "19970 more findings" in flags[-1].detail


def test_inspector_uses_the_callers_spawn_and_kill(tmp_path, inspect):
    started, killed = [], []

    def spawn(argv, **kwargs):
        started.append(argv[:5])
        return subprocess.Popen(argv, start_new_session=True, **kwargs)

    def kill(proc):
        killed.append(proc.pid)
        proc.wait()

    path = make_notebook(tmp_path / "06_feed_forward.ipynb", "def gelu(x):\n    return x")
    found = inspect({"06": path}, {"06": exercises_of("06")}, spawn=spawn, kill=kill)
    assert found["06"].flags == [] and found["06"].cell_numbers == {1: 1}
    assert started == [[sys.executable, "-I", "-S", "-B", "-c"]] and len(killed) == 1
    assert inspect({}, {}) == {}


def test_inspector_takes_relative_paths_from_the_callers_directory(tmp_path, inspect, monkeypatch):
    make_notebook(tmp_path / "06_feed_forward.ipynb", "def gelu(x):\n    return x")
    monkeypatch.chdir(tmp_path)
    found = inspect({"06": Path("06_feed_forward.ipynb")}, {"06": exercises_of("06")})
    assert found["06"].error is None and found["06"].cell_numbers == {1: 1}

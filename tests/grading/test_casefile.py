"""The student copy of a cases file holds no expected value (what the child process gets)."""

from __future__ import annotations

import ast
import shutil
import importlib.util
import sys
from pathlib import Path

import numpy as np
import torch
import pytest

from course_exercises.check import load_cases
from course_exercises.casefile import CASES_DIR, CASES_FILE, StripRefused, cases_parts, cases_source, student_copy


def _load(source: str, tmp_path: Path, name: str):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


@pytest.fixture(scope="module")
def copy_source() -> str:
    return student_copy(cases_source(CASES_FILE), str(CASES_FILE))


def test_course_cases_lose_every_expected_value(copy_source, tmp_path):
    module = _load(copy_source, tmp_path, "student_cases_copy")
    full = load_cases(CASES_FILE)
    assert [c.id for c in module.CASES] == [c.id for c in full.CASES]
    assert all(c.expected is None and c.robust is None for c in module.CASES)
    defined = {n.name for n in ast.parse(copy_source).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert not any(name.startswith("_e_") for name in defined), sorted(defined)
    assert "compare" not in defined and "def compare(" not in copy_source  # hints may use the word, not the function
    for gone in ("HAND_GREEDY", "HAND_BEAM2", "_FILTER_HAND_KEPT", "_pe_closed_form", "_rel_closed_form",
                 "_attention_reference", "_greedy_reference", "_exhaustive_reference", "_filter_reference",
                 "_greedy_is_clear", "ResidualSublayer", "MultiheadAttention", "F.gelu", "F.layer_norm"):
        assert gone not in copy_source, gone
    assert "BEGIN SOLUTION" not in copy_source and "#" not in copy_source.split("\n", 1)[0]


def test_student_copy_replays_the_same_inputs(copy_source, tmp_path):
    """``produce`` of the copy, fed the reference run's recorded inputs, sees what the full module drew."""
    module = _load(copy_source, tmp_path, "student_cases_copy2")
    full = load_cases(CASES_FILE)
    ns = type("NS", (), {"padding_mask": staticmethod(
        lambda lengths, seq_len: (torch.arange(seq_len)[None, :] < lengths[:, None])[:, None, None, :])})
    case = next(c for c in full.CASES if c.id == "8.1-drawn-lengths")
    with full.drawing(full.Draws(salt="s")) as draws:
        want = case.produce(ns)
    copy = next(c for c in module.CASES if c.id == case.id)
    with module.drawing(module.Draws(replay=draws.recorded)):
        got = copy.produce(ns)
    np.testing.assert_array_equal(got["mask"], want["mask"])
    with module.drawing(module.Draws(replay={})), pytest.raises(LookupError):
        copy.produce(ns)


def test_extra_cases_keyword_form_is_stripped_and_positional_form_refused(tmp_path):
    source = '''
"""Extra cases with the answer in three places."""
import numpy as np
import torch
from dataclasses import KW_ONLY, dataclass
ANSWER = np.array([42.0])
def _answer():
    return {"y": ANSWER}
def _check():
    return True
@dataclass
class Case:
    id: str
    chapter: str
    exercise: str
    points: int
    requires: tuple
    produce: object
    _: KW_ONLY
    expected: object = None
    rtol: float = 1e-5
    atol: float = 1e-6
    hint: str = ""
    robust: object = None
    standins: object = None
CASES = [
    Case("x-1", "06", "6.2", 1, ("gelu",), lambda ns: {}, expected=_answer, rtol=1e-6, atol=1e-9, hint="hint"),
    Case(id="x-2", chapter="06", exercise="6.2", points=1, requires=(), produce=lambda ns: {},
         expected=lambda: {"y": np.array([42.0])}, robust=_check),
]
NOTEBOOKS = {"06": "06_feed_forward.ipynb"}
'''
    copy = student_copy(source)
    assert "42" not in copy and "_answer" not in copy and "_check" not in copy and "ANSWER" not in copy
    module = _load(copy, tmp_path, "extra_copy")
    assert module.CASES[0].expected is None
    assert module.CASES[1].expected is None and module.CASES[1].robust is None
    assert module.NOTEBOOKS == {"06": "06_feed_forward.ipynb"}
    positional = source.replace("lambda ns: {}, expected=_answer, rtol=1e-6, atol=1e-9, hint=", "lambda ns: {}, _answer, 1e-6, 1e-9, ")
    with pytest.raises(StripRefused, match="10 arguments by position"):
        student_copy(positional)


def test_kept_helpers_that_produce_needs(tmp_path):
    source = '''
def _inputs():
    return 3
def _produce(ns):
    return {"y": ns.f(_inputs())}
def _expected():
    return {"y": _secret()}
def _secret():
    return 9
CASES = [dict(produce=_produce, expected=_expected)]
'''
    copy = student_copy(source)
    assert "_inputs" in copy and "_produce" in copy
    assert "_secret" not in copy and "_expected" not in copy


def test_every_chapter_file_and_nothing_else_reaches_the_copy(tmp_path):
    """The registry's PARTS name every file of the folder (so every chapter's cases reach the child's copy) and the
    copy is made of them only; their relative imports name what the registry and shared.py define. Broken versions
    caught: a chapter file left out of PARTS; a stray file in the folder read into the copy."""
    parts = [p.name for p, _ in cases_parts(CASES_FILE)]
    on_disk = sorted(p.name for p in CASES_DIR.glob("*.py") if p.name != "__init__.py")
    assert parts[0] == CASES_FILE.name and sorted(parts) == on_disk
    full = load_cases(CASES_FILE)
    assert {ch for ch in full.NOTEBOOKS} == {p[2:4] for p in parts if p.startswith("ch")}
    defined = {name: {n.name for n in ast.parse((CASES_DIR / f"{name}.py").read_text()).body
                      if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
                     | {t.id for n in ast.parse((CASES_DIR / f"{name}.py").read_text()).body
                        if isinstance(n, (ast.Assign, ast.AnnAssign))
                        for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
               for name in ("registry", "shared")}
    for part in parts[1:]:
        for node in ast.parse((CASES_DIR / part).read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1 and node.module in defined, (part, node.module)
                assert {a.name for a in node.names} <= defined[node.module], (part, node.module)
    copy_dir = tmp_path / "cases"
    shutil.copytree(CASES_DIR, copy_dir, ignore=shutil.ignore_patterns("__pycache__"))
    (copy_dir / "notes.py").write_text("SECRET_NOTE = 'not a part'\n")
    assert "SECRET_NOTE" not in cases_source(copy_dir / CASES_FILE.name)
    registry = copy_dir / CASES_FILE.name
    registry.write_text(registry.read_text().replace('    "shared.py",\n', '    "../shared.py",\n'))
    with pytest.raises(ValueError, match="PARTS"):
        cases_source(registry)

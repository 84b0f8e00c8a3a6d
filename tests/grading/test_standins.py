"""Stand-ins for dependent exercises: B's cases run with the course's A, and the child gets A only once A is closed.

Fast tests of the pieces (no sandbox); the full attacks run in the batch
(``test_batch.py``: ``dependent_on_wrong``, ``standin_thief``). Each test here
fails on a deliberately broken version (noted in its docstring).
"""

from __future__ import annotations

import ast
import types

import pytest

from course_exercises.check import load_cases
from course_grader import protocol
from course_exercises.casefile import CASES_FILE, StripRefused, cases_source, student_copy
from course_exercises.extract import install_standins, remove_standins
from course_grader.sandbox import ChildRun, PlanError, Unit, _run_unit, plan_units

cases = load_cases()


def _entries(module=cases):
    return [{"id": c.id, "chapter": c.chapter, "exercise": c.exercise, "function": c.function,
             "standins": c.standins or {}} for c in module.CASES]


def test_the_course_dependencies_have_standins():
    """4.2 calls 4.1, 5.3 calls 5.1/5.2, 8.3 calls 8.1/8.2 (see the notebooks' sources): every case of those runs
    with the course's functions, and no other case does."""
    wanted = {"4.2": {"scaled_dot_product_attention"}, "5.3": {"split_heads", "merge_heads"},
              "8.3": {"causal_mask"}}
    for case in cases.CASES:
        assert set(case.standins or {}) == wanted.get(case.exercise, set()), case.id
    solutions = {"04": "self_attention", "05": "multi_head_attention", "08": "decoder_self_attention_mask"}
    assert set(solutions) == {c.chapter for c in cases.CASES if c.standins}
    for name, source in {n: s for c in cases.CASES for n, s in (c.standins or {}).items()}.items():
        tree = ast.parse(source)
        assert [n.name for n in tree.body if isinstance(n, ast.FunctionDef)] == [name]


def test_units_run_phase_by_phase():
    """Broken version caught: one unit per chapter (stand-ins sent with the cases of the exercise they replace)."""
    chapters = sorted(cases.NOTEBOOKS)
    units = plan_units(chapters, _entries())
    seen_closed: set[str] = set()
    exercise_of = {c.function: c.exercise for c in cases.CASES}
    by_id = {c.id: c for c in cases.CASES}
    for unit in units:
        exercises = {by_id[i].exercise for i in unit.cases}
        for name, _source in unit.standins:  # every exercise a stand-in replaces is closed already
            assert exercise_of[name] in seen_closed and exercise_of[name] not in exercises, (unit, name)
        if not unit.standins:
            assert unit.phase == 0
        seen_closed |= exercises
    assert sorted(i for u in units for i in u.cases) == sorted(c.id for c in cases.CASES)
    phases = [u.phase for u in units]
    assert phases == sorted(phases) and max(phases) == 1


def test_a_chain_of_standins_gets_later_phases_and_a_cycle_is_refused():
    def entry(cid, ex, fn, standins=None):
        return {"id": cid, "chapter": "01", "exercise": ex, "function": fn, "standins": standins or {}}

    chain = [entry("1.3-a", "1.3", "c", {"b": "def b(): pass"}), entry("1.1-a", "1.1", "a"),
             entry("1.2-a", "1.2", "b", {"a": "def a(): pass"})]
    units = plan_units(["01"], chain)
    assert [(u.phase, u.cases) for u in units] == [(0, ("1.1-a",)), (1, ("1.2-a",)), (2, ("1.3-a",))]
    with pytest.raises(PlanError):
        plan_units(["01"], [entry("1.1-a", "1.1", "a", {"b": "x"}), entry("1.2-a", "1.2", "b", {"a": "x"})])
    with pytest.raises(PlanError):  # an exercise whose stand-in is its own function
        plan_units(["01"], [entry("1.1-a", "1.1", "a", {"a": "x"})])


class _FakeSession:
    """Plays a child that answers a unit's command with the given messages."""

    trusted = False
    broken = None
    eof = False

    def __init__(self, messages):
        self.messages = list(messages)
        self.sent = []

    def send(self, command):
        self.sent.append(command)
        return True

    def next_message(self, deadline):
        return self.messages.pop(0) if self.messages else None


def test_a_unit_accepts_only_its_own_cases():
    """Broken version caught: accepting any case id of the chapter (the thief's late 8.2 results would count)."""
    run = ChildRun()
    unit = Unit("08", 1, ("8.3-a",), (("causal_mask", "def causal_mask(size): pass"),))
    late = protocol.case_message("8.2-a", {"mask": "AAAA"})
    session = _FakeSession([protocol.notebook_message("08", "ok"), late, protocol.case_message("8.3-a", {}),
                            protocol.done_message("08", 0), protocol.done_message("08", 7)])
    assert _run_unit(session, 7, unit, run, deadline=0) == "ok"
    assert set(run.results) == {"8.3-a"}
    command = protocol.parse_command(session.sent[0])
    assert command == {"run": "08", "unit": 7, "cases": ["8.3-a"], "standins": {"causal_mask": unit.standins[0][1]}}
    assert run.notebooks["08"] == {"status": "ok", "problem": "", "notes": []}
    assert session.messages == []  # the done of another unit (0) did not end unit 7


def test_commands_are_checked():
    assert protocol.PROTOCOL_VERSION == 2
    assert protocol.parse_command("exit") is None and protocol.parse_command("\n") is None
    line = protocol.run_command("04", 3, ["4.2-a"], {"f": "def f():\n    return 'é'\n"})
    assert "\n" not in line and line.isascii()
    assert protocol.parse_command(line + "\n")["standins"]["f"].endswith("'é'\n")
    for bad in ("04", '{"run": "04"}', '{"run": "04", "unit": "1", "cases": [], "standins": {}}',
                '{"run": "04", "unit": 1, "cases": [1], "standins": {}}', "[1, 2]"):
        with pytest.raises(protocol.ProtocolError):
            protocol.parse_command(bad)


def test_the_student_copy_holds_no_standin(tmp_path):
    """Broken version caught: ``standins`` missing from the stripped keywords (the sources stay in the copy)."""
    copy = student_copy(cases_source(CASES_FILE))
    sources = {s.strip() for c in cases.CASES for s in (c.standins or {}).values()}
    assert sources and not any(s in copy for s in sources)
    assert "_STANDIN_" not in copy
    tree = ast.parse(copy)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "_add"]
    assert calls and all(isinstance(kw.value, ast.Constant) and kw.value.value is None
                         for call in calls for kw in call.keywords if kw.arg == "standins")


def test_positional_standins_are_refused():
    """A stand-in passed by position is not stripped but refused: the grader stops (it used to be blanked by
    position, which reordering the parameters would have defeated)."""
    for call in ('_add("1.2-a", "1.2", 1, print, None, "h", 1e-5, 1e-6, None, {"f": SECRET})',
                 'CASES.append(Case("1.2-b", "01", "1.2", 1, (), print, None, 1e-5, 1e-6, "h", None, {"f": SECRET}))'):
        source = f'''
SECRET = "def f(): return 42"
CASES = []
{call}
'''
        with pytest.raises(StripRefused, match="by position"):
            student_copy(source)
    keyword = student_copy('SECRET = "def f(): return 42"\nCASES = []\n'
                           '_add("1.2-a", "1.2", 1, print, expected=None, hint="h", standins={"f": SECRET})\n')
    assert "42" not in keyword and "SECRET" not in keyword


def test_install_standins_replaces_only_the_named_function():
    """Broken version caught: executing the stand-in in the student's namespace (its imports replace the student's)."""
    ns = types.ModuleType("student")
    exec("import math as torch\ndef causal_mask(q_len, k_len=None):\n    return 'mine'\n"
         "def decoder(size):\n    return causal_mask(size)\n", ns.__dict__)
    source = dict(next(c for c in cases.CASES if c.exercise == "8.3").standins)
    previous = install_standins(ns, source)
    assert ns.torch.__name__ == "math"  # the student's own names stay
    assert ns.decoder(3).shape == (1, 1, 3, 3) and bool(ns.decoder(3)[0, 0, 2, 0]) and not bool(ns.decoder(3)[0, 0, 0, 2])
    remove_standins(ns, previous)
    assert ns.decoder(3) == "mine"


def test_standins_agree_with_the_cases_expected_values():
    """The course's stand-ins are right on their own exercises' cases (what the reference run relies on)."""
    by_exercise = {}
    for c in cases.CASES:
        for name, source in (c.standins or {}).items():
            by_exercise[cases.standin_exercise(name)] = (name, source)
    assert set(by_exercise) == {"4.1", "5.1", "5.2", "8.2"}
    for exercise, (name, source) in by_exercise.items():
        ns = types.ModuleType("course")
        install_standins(ns, {name: source})
        for case in (c for c in cases.CASES if c.exercise == exercise):
            assert cases.compare(case, case.produce(ns), case.expected()) is None, case.id

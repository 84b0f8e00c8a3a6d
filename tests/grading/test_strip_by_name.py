"""The student copy strips ``expected``/``robust``/``standins`` by NAME: reordering or renaming the parameters of
``Case`` or ``_add``, passing a secret-bearing slot by position, or an unknown keyword stops the grader
(:class:`~course_exercises.casefile.StripRefused`) instead of handing a reference to the child.

Tried against the old position-based stripper (``_STRIPPED_POSITIONS = {"Case": (6, 10, 11), "_add": (4, 8, 9)}``,
patched in): every test below that expects a refusal fails, since it raised for nothing. Where the chapters still
pass ``expected=`` by keyword its copy happened to hold no answer; with the secret renamed it kept all 45 ``_e_``
functions, with an unknown keyword one, and with ``_add`` reordered and called by position (the last test) it
blanked ``produce`` and left the answer in the copy.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from course_exercises.casefile import (CASES_DIR, CASES_FILE, POSITIONAL, STRIPPED_KEYWORDS, StripRefused,
                                       cases_source, student_copy)
from course_exercises.check import load_cases


def _registry_copy(tmp_path: Path, edit) -> Path:
    """A copy of the course's registry and its chapter files in ``tmp_path``, with ``edit(file name, text)``
    applied to every file."""
    folder = tmp_path / "cases"
    folder.mkdir()
    for path in CASES_DIR.glob("*.py"):
        (folder / path.name).write_text(edit(path.name, path.read_text(encoding="utf-8")), encoding="utf-8")
    return folder / CASES_FILE.name


def _sub(pattern: str, repl: str, text: str, count: int = 1) -> str:
    new, n = re.subn(pattern, repl, text, count=count)
    assert n, pattern
    return new


def _only(name: str, fn):
    return lambda file, text: fn(text) if file == name else text


def test_the_course_registry_is_copied_and_its_secrets_are_keyword_only():
    cases = load_cases()
    for fn, positional in ((cases.Case, POSITIONAL["Case"]), (cases._add, POSITIONAL["_add"])):
        params = inspect.signature(fn).parameters
        assert tuple(n for n, p in params.items() if p.kind == p.POSITIONAL_OR_KEYWORD) == positional
        assert all(params[k].kind == inspect.Parameter.KEYWORD_ONLY for k in STRIPPED_KEYWORDS)
    copy = student_copy(cases_source(CASES_FILE))
    assert "_e_" not in copy and "_STANDIN_" not in copy


MODIFIED_REGISTRIES = {
    # _add: expected moved before the '*' (the 5th positional parameter, where the old stripper never looked) ...
    "_add-expected-positional": _only("registry.py", lambda t: _sub(
        r"produce: Callable\[\[ModuleType\], Arrays\],\n    \*,\n    expected: Callable\[\[\], Arrays\],",
        "produce: Callable[[ModuleType], Arrays],\n    expected: Callable[[], Arrays],\n    *,", t)),
    # ... and the parameters reordered: expected first, so the old positions (4, 8, 9) hit produce and co.
    "_add-reordered": _only("registry.py", lambda t: _sub(
        r"def _add\(\n    id: str,", "def _add(\n    expected: Callable[[], Arrays],\n    id: str,",
        _sub(r"\n    \*,\n    expected: Callable\[\[\], Arrays\],", "\n    *,", t))),
    # Case: the KW_ONLY marker moved below expected (a positional field again)
    "Case-expected-positional": _only("registry.py", lambda t: _sub(
        r"    _: KW_ONLY.*\n    expected: Callable\[\[\], Arrays\]\n",
        "    expected: Callable[[], Arrays]\n    _: KW_ONLY\n", t)),
    # the secret renamed in the framework (a stripper that only knows 'expected' would pass 'reference' through)
    "expected-renamed": lambda file, t: t.replace("expected=", "reference=").replace(
        "    expected: Callable[[], Arrays]", "    reference: Callable[[], Arrays]"),
    # _add taking **kwargs, so that anything can pass under any name
    "_add-kwargs": _only("registry.py", lambda t: _sub(
        r"standins: dict\[str, str\] \| None = None,\n\) -> None:",
        "standins: dict[str, str] | None = None,\n    **extra,\n) -> None:", t)),
    # a chapter passing the answer by position (as every call did before the split)
    "call-positional": _only("ch06_feed_forward.py", lambda t: _sub(r"expected=", "", t)),
    # a chapter passing the answer under a keyword nobody strips
    "call-unknown-keyword": _only("ch06_feed_forward.py", lambda t: _sub(r"expected=", "answer=", t)),
    # a chapter hiding the arguments in **kwargs or *args
    "call-double-star": _only("ch06_feed_forward.py", lambda t: _sub(
        r"_add\(([^\n]*?), expected=", r"_add(\1, **{'expected': None}, expected=", t)),
    "call-star": _only("ch06_feed_forward.py", lambda t: _sub(r"_add\(", "_add(*(), ", t)),
}


@pytest.mark.parametrize("name", sorted(MODIFIED_REGISTRIES))
def test_a_reordered_or_renamed_registry_is_refused(tmp_path, name):
    """Broken versions caught: a stripper by argument position (the answers stay in the copy, see the module's
    docstring), and one that strips the three keywords but does not check the definitions (reordered, renamed,
    ``**kwargs``) or the calls (positional, unknown keyword, ``*``/``**``)."""
    registry = _registry_copy(tmp_path, MODIFIED_REGISTRIES[name])
    source = cases_source(registry)
    assert source != cases_source(CASES_FILE)
    with pytest.raises(StripRefused):
        student_copy(source, str(registry))


def test_the_unmodified_copy_of_the_registry_is_accepted(tmp_path):
    """The harness itself: the same copy without an edit is stripped without complaint."""
    registry = _registry_copy(tmp_path, lambda file, text: text)
    assert student_copy(cases_source(registry)) == student_copy(cases_source(CASES_FILE))


@pytest.mark.parametrize("call", [
    'Case("x", "06", "6.2", 1, ("gelu",), produce, secret)',              # 7th positional: expected
    '_add("x", "6.2", 1, produce, secret, hint="h")',                      # 5th positional: expected (old slot)
    '_add("x", "6.2", 1, produce, "h", secret)',                           # a slot the old stripper never blanked
    '_add("x", "6.2", 1, produce, hint="h", expected=None, answer=secret)',  # an unknown keyword
    '_add("x", "6.2", 1, produce, hint="h", **{"expected": secret})',      # hidden in **
    'Case(*("x", "06", "6.2", 1, (), produce, secret))',                   # hidden in *
    'mod.Case("x", "06", "6.2", 1, ("gelu",), produce, secret)',           # called through a module
])
def test_calls_that_could_carry_a_secret_are_refused(call):
    source = f"secret = lambda: 42\nproduce = print\nCASES = []\nCASES.append({call})\n"
    with pytest.raises(StripRefused):
        student_copy(source)


def test_a_reordered_add_called_by_position_does_not_leak():
    """The attack on the old stripper in full: ``_add`` reordered so that the answer is the 3rd argument, called by
    position. Blanking positions (4, 8, 9) removed ``produce`` and left ``_answer`` (and the 42) in the copy; by
    name, the definition and the call are refused."""
    source = '''
CASES = []
def _answer():
    return 42
def _produce(ns):
    return ns.f()
def _add(id, exercise, expected, points, produce, hint, rtol=1e-5, atol=1e-6, robust=None, standins=None):
    CASES.append((id, exercise, points, produce, expected))
_add("6.2-x", "6.2", _answer, 1, _produce, "h")
'''
    with pytest.raises(StripRefused, match="positional parameters"):
        student_copy(source)
    with pytest.raises(StripRefused, match="by position"):  # the call alone, with _add imported from elsewhere
        student_copy(source.split("def _add", 1)[0] + '_add("6.2-x", "6.2", _answer, 1, _produce, "h")\n')

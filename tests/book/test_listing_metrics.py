"""The listing gate (scripts/listing_metrics.py) counts what it says it counts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _metrics():
    spec = importlib.util.spec_from_file_location("listing_metrics", ROOT / "scripts" / "listing_metrics.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


SAMPLE = '''
    def f(x):
        """Docstring,
        two lines."""
        # a comment

        total = 0          # code with a comment
        for i in range(x):
            if i % 2:
                while total < 3:
                    total += (
                        i
                    )
        return total
'''


def test_code_lines_leave_out_docstring_comments_and_blanks():
    m = _metrics()
    # def, total =, for, if, while, total += ( / i / ), return  -> 9
    assert m.count_code_lines(SAMPLE) == 9


def test_nesting_depth_counts_compound_statements_in_function_bodies():
    m = _metrics()
    assert m.nesting_depth(SAMPLE) == 3
    assert m.nesting_depth("def g():\n    return 1\n") == 0
    # a nested function starts again at depth 0; a class body is not a function body
    nested = "class C:\n    def h(self):\n        if 1:\n            def k():\n                return 2\n"
    assert m.nesting_depth(nested) == 1


def test_private_names_are_flagged():
    m = _metrics()
    import course_lib.data as data

    assert m._is_public(data.shift_right)  # in a private module, re-exported by course_lib.data
    assert not m._is_public(m._private)  # a function with an underscore name


def test_every_listing_the_book_shows_is_measured():
    m = _metrics()
    listings = m.measure_book(ROOT / "book")
    shown = {item.qualname for item in listings}
    assert "course_lib.attention.scaled_dot_product_attention" in shown
    assert len(listings) >= 40

"""Forwarding entry: ``python -m course_lib.check`` runs the student's checker, :mod:`course_exercises.check`.

The checker moved out of the learner's package (``course_lib`` holds what the
chapters teach); this name stays because students' saved notebooks run it in
their last cell, and ``from course_lib.check import load_cases`` keeps working.
New text uses ``python -m course_exercises.check`` or the ``course-check``
command. Declared in the import contract (``pyproject.toml``,
``[tool.importlinter]``) as one of the two places where ``course_lib`` imports
another package of the course. (A package, not a module ``check.py``, so that
git follows the checker's own file to ``course_exercises/check.py``.)
"""

from course_exercises.check import *  # noqa: F401,F403 - the old module's names, for old scripts
from course_exercises.check import __all__, main  # noqa: F401

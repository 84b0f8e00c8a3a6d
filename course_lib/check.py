"""Forwarding entry: ``python -m course_lib.check`` runs the student's checker, :mod:`course_exercises.check`.

The checker moved out of the learner's package (``course_lib`` holds what the
chapters teach); this name stays because students' saved notebooks run it in
their last cell. New text uses ``python -m course_exercises.check`` or the
``course-check`` command. Declared in the import contract (``pyproject.toml``,
``[tool.importlinter]``) as the one place where ``course_lib`` imports the
exercises' package.
"""

from course_exercises.check import *  # noqa: F401,F403 - the old module's names, for old scripts
from course_exercises.check import __all__, main  # noqa: F401

if __name__ == "__main__":
    raise SystemExit(main())

"""Grading tools of the course: notebook extraction, the grader, reports.

* :mod:`course_lib.grading.extract` - read the graded code out of an exercise
  notebook (top-level imports, function and class definitions and literal
  constants, never demo statements) and load it as a fresh module;
  :class:`~course_lib.grading.extract.SubmissionError` for unusable notebooks.
* The instructor's grader, ``python -m course_lib.grading`` (modules ``cli``,
  ``grader``, ``intake``, ``sandbox``, ``child``, ``compare``,
  ``static_checks``, ``report``; each documents itself).

The student's own check command is :mod:`course_lib.check`
(``python -m course_lib.check 04``). The contract shared by the exercises,
their tests and the grader is ``tests/exercises/CONTRACT.md``.

Importing this package does no work and imports no submodule: import what you
need, e.g. ``from course_lib.grading.extract import load_namespace``.
"""

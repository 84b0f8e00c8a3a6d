"""course_exercises: what the student's checker and the instructor's grader share.

* :mod:`course_exercises.cases`    - the registry of the exercises' autograded cases
  (``cases/``: ``registry.py`` and a file per chapter; every case's inputs, ``produce`` and ``expected``);
* :mod:`course_exercises.extract`  - the graded code of an exercise notebook, loaded as a module;
* :mod:`course_exercises.compare`  - the comparison of a produced value with the expected one;
* :mod:`course_exercises.casefile` - the student copy of a cases file (every expected value removed);
* :mod:`course_exercises.static_checks` - the advisory flags (delegation to a built-in, file reads);
* :mod:`course_exercises.check`    - the student's check command (``course-check``,
  ``python -m course_exercises.check``; ``python -m course_exercises.check`` still forwards here),
  which runs the cases in :mod:`course_exercises.check_runner`, a child process.

It runs on Linux, macOS and Windows (no POSIX-only call: ``tests/exercises/test_portable.py``).
It imports ``course_lib`` (the cases use its layers as references) and never the grader,
``course_grader``: a contract in ``pyproject.toml`` (``[tool.importlinter]``).
The notebooks' sources are in ``exercise_sources/``; the contract between exercises,
tests and grader is ``tests/exercises/CONTRACT.md``.
"""

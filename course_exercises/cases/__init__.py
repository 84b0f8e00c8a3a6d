"""The registry of the exercises' autograded cases: ``registry.py`` and the chapter files it names.

``registry.py`` (the framework: ``NOTEBOOKS``, ``EXERCISES``, ``Case``, ``_add``, the input helpers,
the stand-ins' sources) names its parts in ``PARTS``: ``shared.py`` (helpers several chapters use)
and ``ch01_motivation.py`` ... ``ch13_modern_block.py``, which hold every case's ``expected()``
(reference values). They are loaded by path, in order, as the one module ``course_exercise_cases``
with :func:`course_exercises.check.load_cases` (the student's check command, the tests, the
grader's trusted side); importing this package imports nothing.

The grader's sandbox covers this folder in the process that runs a student's
code: that process gets only a copy of the cases with every expected value
removed (:mod:`course_exercises.casefile`). On a machine where the sandbox
cannot use namespaces (``--sandbox nobody``) make the folder unreadable for
other users (``chmod -R go-rwx``); the grader checks this before it grades.
"""

"""The registry of the exercises' autograded cases: ``cases.py`` in this folder.

``cases.py`` holds every case's ``expected()`` (reference values). It is loaded
by path as the module ``course_exercise_cases`` with
:func:`course_exercises.check.load_cases` (the student's check command, the tests,
the grader's trusted side); importing this package imports nothing.

The grader's sandbox covers this folder in the process that runs a student's
code: that process gets only a copy of the cases with every expected value
removed (:mod:`course_exercises.casefile`). On a machine where the sandbox
cannot use namespaces (``--sandbox nobody``) make the folder unreadable for
other users (``chmod -R go-rwx``); the grader checks this before it grades.
"""

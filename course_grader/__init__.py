"""course_grader: the instructor's autograder. **Linux only** (its sandbox is built from
Linux namespaces, cgroups and a seccomp filter); on macOS or Windows grade in a Linux
container or virtual machine (e.g. Docker, WSL 2). The student's side, ``course-check``,
runs everywhere.

* ``python -m course_grader`` / ``course-grade`` (:mod:`course_grader.cli`; the old name
  ``python -m course_grader`` forwards here);
* :mod:`course_grader.grader` (the parent: references, comparison, grades),
  :mod:`course_grader.sandbox` and :mod:`course_grader.child` (the isolated process that
  runs a student's code), :mod:`course_grader.protocol` (their messages),
  :mod:`course_grader.intake` (submissions), :mod:`course_grader.inspect_notebooks`,
  :mod:`course_grader.report` (grades.csv, feedback, Gradescope results).

The cases, the notebook extraction and the comparison it shares with the student's
checker live in :mod:`course_exercises`. Design and threat model: ``SECURITY.md`` in
this folder. Importing this package does no work and imports no submodule.
"""

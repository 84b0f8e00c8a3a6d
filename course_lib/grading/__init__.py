"""Forwarding entry: ``python -m course_lib.grading`` runs the instructor's grader, :mod:`course_grader`.

The grader moved out of the learner's package; this name stays because
instructors' scripts (and the README of earlier versions) call it. New text uses
``python -m course_grader`` or the ``course-grade`` command. Importing this
package does no work; the import contract (``pyproject.toml``,
``[tool.importlinter]``) declares ``course_lib.grading.__main__`` as the one
place where ``course_lib`` imports the grader.
"""

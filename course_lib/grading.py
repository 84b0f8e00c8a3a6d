"""Forwarding entry: ``python -m course_lib.grading`` runs the instructor's grader, ``python -m course_grader``.

The grader moved out of the learner's package; this name stays because
instructors' scripts (and the README of earlier versions) call it. New text
uses ``python -m course_grader`` or the ``course-grade`` command. Importing
this module does no work; the import contract (``pyproject.toml``,
``[tool.importlinter]``) declares it as one of the two places where
``course_lib`` imports another package of the course.
"""

if __name__ == "__main__":
    from course_grader.cli import main

    raise SystemExit(main())

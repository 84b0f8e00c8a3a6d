"""``python -m course_lib.grading``: forwards to the grader, ``python -m course_grader`` (see :mod:`course_lib.grading`)."""

from course_grader.cli import main

if __name__ == "__main__":
    raise SystemExit(main())

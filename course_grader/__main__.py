"""``python -m course_lib.grading``: the instructor's grader (see :mod:`course_lib.grading.cli`)."""

from course_grader.cli import main

if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m course_grader``: the instructor's grader (see :mod:`course_grader.cli`)."""

from course_grader.cli import main

if __name__ == "__main__":
    raise SystemExit(main())

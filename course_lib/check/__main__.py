"""``python -m course_lib.check``: forwards to ``python -m course_exercises.check`` (see :mod:`course_lib.check`)."""

from course_exercises.check import main

if __name__ == "__main__":
    raise SystemExit(main())

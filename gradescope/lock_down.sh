#!/usr/bin/env bash
# Leave exactly one copy of the solutions and one of the cases, readable by root only.
# Usage: lock_down.sh SOURCE CASES_DIR
#   SOURCE:    the repository (/autograder/source); its solutions/ is the one copy of the answers
#   CASES_DIR: the installed package's course_exercises/cases (the one copy the grader imports)
# Without namespaces ('nobody' mode) every world-readable file is readable by the student's code,
# so no other copy may stay readable. Called by setup.sh; tested by tests/grading/test_gradescope_layout.py.
set -euo pipefail
SOURCE=$(realpath "$1")
CASES=$(realpath "$2")
# The source tree's cases (and what 'pip install .' may leave: build/, *.egg-info) are copies the
# grader never reads: it imports the installed package. Keep them only when CASES is that copy
# (an editable install).
if [ "$CASES" != "$SOURCE/course_exercises/cases" ]; then
    rm -rf "$SOURCE/course_exercises/cases"
fi
rm -rf "$SOURCE/build" "$SOURCE"/*.egg-info
chmod -R go-rwx "$SOURCE" "$CASES"

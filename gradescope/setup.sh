#!/usr/bin/env bash
# Gradescope set-up (runs once, as root, when the autograder image is built).
# The autograder zip holds this repository at its root (setup.sh and run_autograder are copied
# from gradescope/ to the zip's top level). See gradescope/README.md.
set -euo pipefail
SOURCE=/autograder/source
cd "$SOURCE"
apt-get update && apt-get install -y --no-install-recommends python3 python3-pip util-linux
python3 -m pip install --break-system-packages --index-url https://download.pytorch.org/whl/cpu "torch>=2.2,<2.14" \
    || python3 -m pip install --index-url https://download.pytorch.org/whl/cpu "torch>=2.2,<2.14"
python3 -m pip install --no-cache-dir --break-system-packages . || python3 -m pip install --no-cache-dir .

# Without namespaces students' code runs as 'nobody' and can read every world-readable file of the
# container: leave exactly one copy of the solutions ($SOURCE/solutions) and one of the cases (every
# expected value: the installed package's course_exercises/cases/, beside what the student's
# process imports), both readable by root only; remove the other copies. The grader checks the
# paths it knows before it grades.
cd /  # from here on the installed package is the one imported (as in run_autograder)
bash "$SOURCE/gradescope/lock_down.sh" "$SOURCE" \
    "$(python3 -c 'from course_exercises.casefile import CASES_DIR; print(CASES_DIR)')"
# Check once that the solutions earn full marks (run_autograder draws new inputs per submission).
CHECK=$(mktemp -d /tmp/course-grade-check.XXXXXX)
chmod 700 "$CHECK"
trap 'rm -rf "$CHECK"' EXIT
python3 -m course_grader "$SOURCE/solutions" --single --student reference --out "$CHECK" --no-progress \
    --solutions "$SOURCE/solutions"
python3 - "$CHECK/grades.csv" <<'PY'
import csv
import sys
row = next(csv.DictReader(open(sys.argv[1])))
assert row["score"] == row["max"], f"the solutions do not earn full marks: {row}"
PY

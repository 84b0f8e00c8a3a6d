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
python3 -m pip install --break-system-packages . || python3 -m pip install .

# Reference values: grade the solutions once, as a submission; they must earn full marks.
python3 -m course_lib.grading "$SOURCE/solutions" --single --student reference \
    --out /autograder/reference --no-progress
python3 - <<'PY'
import csv
row = next(csv.DictReader(open("/autograder/reference/grades.csv")))
assert row["score"] == row["max"], f"the solutions do not earn full marks: {row}"
PY
# Students' code runs as 'nobody': keep the answers and the reference out of its reach.
chmod -R go-rwx "$SOURCE/solutions" /autograder/reference

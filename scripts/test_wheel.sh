#!/usr/bin/env bash
# The student's and the instructor's commands from an installed package, outside a clone
# (a stage of scripts/test_all.sh). Builds the wheel, installs it in a fresh virtual environment
# (pip's cache is reused; $PIP_EXTRA is passed to pip as in the Makefile, e.g. PyTorch's CPU index),
# then, from a temporary folder outside the clone:
#   * course-check on a copy of solutions/ (full points) and of exercises/ (zero);
#   * course-grade on a small submissions folder (the solutions, the stubs, and the attack that reads
#     the package's own cases file) with --solutions pointing at a copy of solutions/;
#   * the usage errors outside a clone (no default folder for course-check, no default --solutions);
# and compares every score with what the clone's commands give for the same folders.
# Usage: scripts/test_wheel.sh [PYTHON]   (CHAPTERS="06 08" by default: two short chapters)
set -euo pipefail
cd "$(dirname "$0")/.."
CLONE=$(pwd)
PY=${1:-.venv/bin/python}
PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
PIP_EXTRA=${PIP_EXTRA:-}
CHAPTERS=${CHAPTERS:-06 08}
read -r -a CH <<< "$CHAPTERS"
# In RAM when there is room: the environment (1.2 GB, mostly torch) installs twice as fast there and
# is removed at once, where a disk may take half a minute to delete it.
BASE=${TMPDIR:-/tmp}
if [ -d /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR == 2 {print $4}')" -gt 4000000 ]; then BASE=/dev/shm; fi
TMP=$(mktemp -d "$BASE/course-wheel.XXXXXX")
chmod 755 "$TMP"  # the grader's children (user nobody) import from the virtual environment in it
trap 'rm -rf "$TMP"' EXIT
step() { printf '[%4ds] %s\n' "$SECONDS" "$*"; }

step "copying the project's files (tracked and untracked, not ignored) and building the wheel"
# A copy: an in-tree build leaves build/ behind, and stale files in build/lib would enter the wheel.
"$PY" - "$TMP/src" <<'EOF'
import os, shutil, subprocess, sys
dst = sys.argv[1]
names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       check=True, capture_output=True).stdout.decode().split("\0")
for name in names:
    if name and os.path.isfile(name) and not os.path.islink(name):
        os.makedirs(os.path.join(dst, os.path.dirname(name)), exist_ok=True)
        shutil.copy2(name, os.path.join(dst, name))
EOF
"$PY" -m pip wheel --quiet --no-deps "$TMP/src" -w "$TMP/dist" > "$TMP/wheel.log" 2>&1 \
  || { cat "$TMP/wheel.log"; exit 1; }
WHEEL=$(ls "$TMP"/dist/*.whl)
step "built $(basename "$WHEEL")"
"$PY" - "$WHEEL" <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
for need in ("course_exercises/cases/registry.py", "course_exercises/cases/shared.py",
             "course_exercises/cases/ch01_motivation.py", "course_exercises/cases/ch13_modern_block.py",
             "course_exercises/check_runner.py", "course_grader/child.py",
             "course_book/fonts/NotoSansSC-Regular-subset.ttf", "course_book/fonts/OFL.txt",
             "course_grader/SECURITY.md", "course_lib/check/__main__.py", "course_lib/grading.py"):
    assert need in names, f"the wheel lacks {need}"
assert not [n for n in names if n.startswith(("tests/", "solutions/", "exercises/", "exercise_sources/"))], \
    "the wheel ships the repository"
EOF

step "installing it in a fresh virtual environment"
"$PY" -m venv "$TMP/venv"
VPY=$TMP/venv/bin/python
# --no-compile: byte-compiling all of torch and sympy doubles the install; the first course-check
# caches the byte code of what the commands import.
# shellcheck disable=SC2086
"$VPY" -m pip install --quiet --no-compile $PIP_EXTRA "$WHEEL" > "$TMP/install.log" 2>&1 \
  || { grep -v "is ignored" "$TMP/install.log"; exit 1; }
if "$VPY" -c "import pytest" 2> /dev/null; then  # a dev dependency only: the commands must run without it
  echo "pytest came with the wheel's dependencies: this stage cannot show that the commands run without it"; exit 1
fi
step "installed"

RUN=$TMP/run  # outside the clone: the commands cannot lean on it
mkdir -p "$RUN/subs/full" "$RUN/subs/stub"
cp -r solutions "$RUN/solutions"
cp -r exercises "$RUN/exercises"
for ch in "${CH[@]}"; do
  cp solutions/"$ch"_*.ipynb "$RUN/subs/full/"
  cp exercises/"$ch"_*.ipynb "$RUN/subs/stub/"
done
"$PY" - "$RUN/subs" "${CH[@]}" <<'EOF'
import sys
from pathlib import Path
sys.path.insert(0, "tests/grading")
from adversaries import NB, PACKAGED_CASES_ATTACK, packaged_cases_attack, write_folder
# the attack on the package's cases file of the grader's tests (chapter 06; the solutions elsewhere)
write_folder(Path(sys.argv[1]) / PACKAGED_CASES_ATTACK, packaged_cases_attack([c for c in sys.argv[2:] if c in NB]))
EOF
cd "$RUN"

step "usage errors outside a clone"
# from a folder without notebooks (the check looks only in the current folder and its exercises/)
if (cd "$TMP" && "$TMP/venv/bin/course-check") > "$TMP/err.txt" 2>&1; then
  echo "course-check without a folder, run where there are no notebooks, succeeded"; exit 1
fi
grep -q "name that folder" "$TMP/err.txt" || { cat "$TMP/err.txt"; exit 1; }
if "$TMP/venv/bin/course-grade" subs --out "$TMP/none" > "$TMP/err.txt" 2>&1; then
  echo "course-grade without --solutions outside a clone succeeded"; exit 1
fi
grep -q -- "--solutions DIR" "$TMP/err.txt" || { cat "$TMP/err.txt"; exit 1; }
step "the names of earlier versions forward (python -m course_lib.check / course_lib.grading)"
for module in course_lib.check course_lib.grading; do
  "$VPY" -m "$module" --version > "$TMP/err.txt" 2>&1 || { echo "python -m $module failed:"; cat "$TMP/err.txt"; exit 1; }
done

# Each command of the installed package runs beside the same command of the clone (2 cores).
both() {  # both NAME WHEEL-COMMAND... -- CLONE-COMMAND...: run the two at once, logs in $TMP/NAME-{wheel,clone}.txt
  local name=$1; shift
  local wheel=() clone=()
  while [ "$1" != "--" ]; do wheel+=("$1"); shift; done
  shift
  clone=("$@")
  "${wheel[@]}" > "$TMP/$name-wheel.txt" 2>&1 & local pw=$!
  (cd "$CLONE" && "${clone[@]}") > "$TMP/$name-clone.txt" 2>&1 & local pc=$!
  local rc=0
  wait "$pw" || { echo "the installed package's command failed:"; tail -40 "$TMP/$name-wheel.txt"; rc=1; }
  wait "$pc" || { echo "the clone's command failed:"; tail -40 "$TMP/$name-clone.txt"; rc=1; }
  return $rc
}
for folder in solutions exercises; do
  step "course-check $folder ${CH[*]} (installed package, outside the clone) and the clone's check of it"
  both "check-$folder" "$TMP/venv/bin/course-check" "$folder" "${CH[@]}" \
    -- "$PY" -m course_exercises.check --notebooks "$RUN/$folder" "${CH[@]}"
done
step "course-grade subs --solutions copy (installed package, outside the clone) and the clone's grader"
both grade "$TMP/venv/bin/course-grade" subs --out "$TMP/grade-wheel" --solutions "$RUN/solutions" \
    --chapters "${CH[@]}" --no-progress \
  -- "$PY" -m course_grader "$RUN/subs" --out "$TMP/grade-clone" --chapters "${CH[@]}" --no-progress
# Gradescope's layout: the clone's course_lib imported (run from the clone) while the installed wheel puts
# a second copy, with its cases, in site-packages - on the child's import paths too.
step "the grader of the clone run by the wheel's Python (two copies of the package, as on Gradescope)"
(cd "$CLONE" && "$TMP/venv/bin/python" -m course_grader "$RUN/subs" --out "$TMP/grade-both" \
    --chapters "${CH[@]}" --no-progress) > "$TMP/grade-both.txt" 2>&1 \
  || { echo "the grader failed:"; tail -40 "$TMP/grade-both.txt"; exit 1; }

step "comparing the scores"
"$PY" - "$TMP" <<'EOF'
import csv, json, re, sys
from pathlib import Path
tmp = Path(sys.argv[1])
row = re.compile(r"^\s+(\d+\.\d+)\s+(\w+)\s+(\d+)/(\d+)\s", re.M)
total = re.compile(r"^\s+Total\s+(\d+)/(\d+)", re.M)
failures = []
for folder, full in (("solutions", True), ("exercises", False)):
    got = {side: (tmp / f"check-{folder}-{side}.txt").read_text() for side in ("wheel", "clone")}
    rows = {side: row.findall(text) for side, text in got.items()}
    totals = {side: total.findall(text) for side, text in got.items()}
    print(f"course-check {folder}: wheel {totals['wheel']}, clone {totals['clone']}")
    if rows["wheel"] != rows["clone"] or totals["wheel"] != totals["clone"] or not rows["wheel"]:
        failures.append(f"course-check {folder}: the installed package and the clone disagree:\n"
                        f"{got['wheel']}\n--- clone ---\n{got['clone']}")
    elif any((int(e) == int(p)) != full or (not full and int(e)) for _, _, e, p in rows["wheel"]):
        failures.append(f"course-check {folder}: expected {'full points' if full else 'zero'}:\n{got['wheel']}")

def grades(side):
    with open(tmp / f"grade-{side}" / "grades.csv", newline="") as fh:
        return {r["student"]: r for r in csv.DictReader(fh)}

wheel, clone, both = grades("wheel"), grades("clone"), grades("both")
exercises = [k for k in next(iter(clone.values())) if re.fullmatch(r"\d+\.\d+", k)]
for student in sorted(clone):
    w, c = wheel.get(student, {}), clone[student]
    print(f"course-grade {student}: wheel {w.get('score')}/{w.get('max')}, clone {c['score']}/{c['max']}")
    if [w.get(k) for k in ["score", "max", *exercises]] != [c[k] for k in ["score", "max", *exercises]]:
        failures.append(f"course-grade {student}: wheel {w} != clone {c}")
    b = both.get(student, {})
    if [b.get(k) for k in ["score", "max", *exercises]] != [c[k] for k in ["score", "max", *exercises]]:
        failures.append(f"course-grade with two copies of the package {student}: {b} != clone {c}")
if set(wheel) != set(clone):
    failures.append(f"course-grade: students {sorted(wheel)} != {sorted(clone)}")
check_max = sum(int(p) for _, _, _, p in row.findall((tmp / "check-solutions-wheel.txt").read_text()))
expect = {"full": check_max, "stub": 0}
for student, score in expect.items():
    if int(wheel.get(student, {}).get("score", -1)) != score or int(wheel.get(student, {}).get("max", -1)) != check_max:
        failures.append(f"course-grade {student}: expected {score}/{check_max}, got {wheel.get(student)}")
attack = wheel.get("reads_packaged_cases", {})
if any(int(attack.get(k, 1)) for k in exercises if k.startswith("6.")):
    failures.append(f"course-grade: the submission that reads the packaged cases scored on chapter 6: {attack}")
if "6.1" in exercises:  # what it saw of site-packages/course_exercises/cases/ (it reports in 6.1's error)
    seen = [c.get("child_error") or "" for c in json.loads((tmp / "grade-wheel" / "reads_packaged_cases" /
                                                             "grade.json").read_text())["cases"]
            if c["exercise"] == "6.1" and "-rejects-" not in c["case_id"]]  # a rejection case catches the probe itself
    print(f"course-grade reads_packaged_cases saw: {seen[0].splitlines()[0] if seen else None}")
    if not seen or not all("read: PermissionError" in t and "import: done" not in t for t in seen):
        failures.append(f"course-grade: the packaged cases were not covered for the child: {seen[:1]}")
    seen = [c.get("child_error") or "" for c in json.loads((tmp / "grade-both" / "reads_packaged_cases" /
                                                             "grade.json").read_text())["cases"]
            if c["exercise"] == "6.1" and "-rejects-" not in c["case_id"]]  # a rejection case catches the probe itself
    print(f"course-grade (two copies) reads_packaged_cases saw: {seen[0].splitlines()[0] if seen else None}")
    if not seen or any("other copy read" in t or "import: done" in t for t in seen) or not any(
            "other copy: PermissionError" in t for t in seen):
        failures.append(f"course-grade: the second copy of the cases was not covered for the child: {seen[:1]}")
if failures:
    print("\n\n".join(failures))
    sys.exit(1)
print("the installed package gives the clone's points")
EOF
step "done"

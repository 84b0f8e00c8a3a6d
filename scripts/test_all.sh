#!/usr/bin/env bash
# Every check of the project, stage by stage (called by `make test`).
# Each stage prints its wall time; all stages run even when one fails, and the
# script exits non-zero if any failed. Usage: scripts/test_all.sh [PYTHON]
set -u
cd "$(dirname "$0")/.."
PY=${1:-.venv/bin/python}
BIN=$(dirname "$PY")
T=scripts/timed.sh
failed=()
stage() { local name=$1; shift; "$T" "$name" "$@" || failed+=("$name"); }

stage "Chinese edition's catalogs (nothing untranslated or fuzzy; glossary terms used)" \
    bash -c '"$0" scripts/i18n.py check && "$0" scripts/i18n.py terms' "$PY"
stage "import contracts (lint-imports: course_lib imports none of the other packages; no cycles)" \
    "$BIN/lint-imports" --no-cache
stage "listings the book displays (<= 60 lines of code, depth <= 3, public)" "$PY" scripts/listing_metrics.py
stage "library tests (tests/lib)" "$PY" -m pytest tests/lib -q -p no:cacheprovider
stage "book helpers and chapter checks (tests/book)" "$PY" -m pytest tests/book -q -p no:cacheprovider
stage "exercise tests on solutions/ (must all pass)" "$PY" -m pytest tests/exercises -q -p no:cacheprovider \
    --notebooks solutions
stage "exercise tests on untouched exercises/ (every stub must fail with its NotImplementedError)" \
    "$PY" -m pytest tests/exercises/test_exercises.py -q -p no:cacheprovider --notebooks exercises --expect-stubs
stage "grader tests (tests/grading)" "$PY" -m pytest tests/grading -q -p no:cacheprovider
stage "installed wheel outside the clone (course-check, course-grade)" scripts/test_wheel.sh "$PY"
stage "solution notebooks (nbval)" "$PY" -m pytest -q -p no:cacheprovider --nbval-lax --nbval-current-env solutions
stage "book notebooks (nbval)" "$PY" -m pytest -q -p no:cacheprovider --nbval-lax --nbval-current-env \
    --nbval-sanitize-with book/_sanitize.cfg book
stage "book build (clean, strict)" make --no-print-directory book VENV="$(dirname "$BIN")"
stage "book in headless Chromium, offline (explorers respond, no errors, 400 px)" \
    "$PY" -m pytest tests/browser -q -p no:cacheprovider -rs

echo
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED stages: ${failed[*]}"
  exit 1
fi
echo "All stages passed."

"""Running the grader as a command and reading its reports back (for the grader's tests)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_grader(args: list[str], timeout: float = 600, work_tmp: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m course_grader ARGS`` from the repository root; return the finished process.

    ``work_tmp``: the ``TMPDIR`` of the grader, where it makes its children's work folders (so
    that a test can tell its own children's command lines from those of other grader runs).
    """
    env = dict(os.environ)
    if work_tmp is not None:
        env["TMPDIR"] = str(work_tmp)
    return subprocess.run([sys.executable, "-m", "course_grader", *map(str, args), "--no-progress"],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


@dataclass
class Run:
    """A finished grading run and its reports."""

    out: Path
    proc: subprocess.CompletedProcess
    rows: dict[str, dict[str, str]]
    summary: dict
    manifest: dict

    def grade(self, student: str) -> dict:
        return json.loads((self.out / student / "grade.json").read_text())

    def results(self, student: str) -> dict:
        return json.loads((self.out / student / "results.json").read_text())

    def points(self, exercise: str) -> int:
        return sum(c["points"] for c in self.manifest["cases"] if c["exercise"] == exercise)


def load_run(out: Path, proc: subprocess.CompletedProcess) -> Run:
    assert proc.returncode == 0, f"grader failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    with open(out / "grades.csv", newline="") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    summary = json.loads((out / "summary.json").read_text())
    manifest = json.loads(Path(summary["manifest"]).read_text())
    return Run(out, proc, rows, summary, manifest)

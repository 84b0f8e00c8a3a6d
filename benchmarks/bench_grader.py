"""The instructor's grader on a class of 30: wall time and memory.

Builds 30 submissions in a temporary folder - 10 full (the solutions), 10
partial (the solutions with every exercise of chapters 4, 6 and 9 replaced by
its stub), 10 untouched stubs; half folders, half ``.zip`` files - and grades
every chapter with ``python -m course_grader ... --jobs 2``. Checks that
every full submission earns the maximum, every stub 0, and every partial the
same score, and measures:

* wall-clock seconds of the whole command (reference run included), side by
  side with the 64.5 s measured before the isolation redesign (2026-11-30);
* the grader's own peak memory (``VmHWM`` of the parent process, polled);
* the largest child's peak memory (``ru_maxrss`` of reaped descendants);
* fairness: the runtime of one honest submission graded alone, and graded
  next to a submission whose code starts 16 ``setsid`` CPU spinners (each its
  own session, so ``nice`` would not hold them; the per-child cgroup does).

Targets: at most 130 s (2x the old grader) on 2 cores, grader memory under
1 GB, the honest runtime next to the spinners at most 1.5x its runtime alone.

    python benchmarks/bench_grader.py [--submissions 30] [--jobs 2] [--keep DIR] [--no-fairness]

The last line of output is JSON.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTIAL_CHAPTERS = ("04", "06", "09")
BEFORE_REDESIGN_S = 64.5
SPINNERS = """
import os
import sys
import torch
_STARTED = []
def gelu(x):
    if not _STARTED:
        _STARTED.append(1)
        for _ in range(16):
            if os.fork() == 0:
                os.setsid()
                os.execv(sys.executable, [sys.executable, "-c",
                         "import time\\nend = time.time() + 60\\nwhile time.time() < end: pass\\n"])
    import time
    time.sleep(8)  # keep the spinners' child alive while the honest one runs
    return 0.5 * x * (1 + torch.erf(x / 2 ** 0.5))
"""


def _fairness(base: Path, jobs: int) -> tuple[float, float]:
    """Runtime of one honest submission alone, and next to a submission with 16 setsid spinners."""
    books = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
    times = []
    for with_spinner in (False, True):
        subs, out = base / f"fair-{with_spinner}", base / f"fair-out-{with_spinner}"
        (subs / "honest").mkdir(parents=True)
        for book in books:
            shutil.copy(book, subs / "honest" / book.name)
        if with_spinner:
            (subs / "a_spinner").mkdir()
            nb = json.loads((ROOT / "solutions" / "06_feed_forward.ipynb").read_text())
            nb["cells"].append({"cell_type": "code", "execution_count": None, "id": "spin", "metadata": {},
                                "outputs": [], "source": SPINNERS})
            (subs / "a_spinner" / "06_feed_forward.ipynb").write_text(json.dumps(nb))
        cmd = [sys.executable, "-m", "course_grader", str(subs), "--out", str(out), "--jobs", str(jobs),
               "--no-progress"]
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(json.loads((out / "honest" / "grade.json").read_text())["runtime"])
    return times[0], times[1]


def _build(subs: Path, n: int) -> dict[str, str]:
    kinds = {}
    books = sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
    for i in range(n):
        kind = ("full", "partial", "stub")[i % 3]
        files = {}
        for book in books:
            src = ROOT / ("exercises" if kind == "stub" or (kind == "partial" and book.name[:2] in PARTIAL_CHAPTERS)
                          else "solutions") / book.name
            files[book.name] = src.read_bytes()
        name = f"student{i:02d}_{kind}"
        kinds[name] = kind
        if i % 2:
            with zipfile.ZipFile(subs / f"{name}.zip", "w", zipfile.ZIP_DEFLATED) as zf:
                for fname, data in files.items():
                    zf.writestr(f"{name}/{fname}", data)
        else:
            (subs / name).mkdir()
            for fname, data in files.items():
                (subs / name / fname).write_bytes(data)
    return kinds


def _hwm_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--submissions", type=int, default=30)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--keep", type=Path, default=None, help="keep the submissions and reports in this folder")
    ap.add_argument("--no-fairness", action="store_true", help="skip the honest-next-to-spinners measurement")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-grader-")) if args.keep is None else args.keep
    base.mkdir(parents=True, exist_ok=True)
    subs, out = base / "subs", base / "out"
    shutil.rmtree(subs, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    subs.mkdir()
    kinds = _build(subs, args.submissions)
    cmd = [sys.executable, "-m", "course_grader", str(subs), "--out", str(out), "--jobs", str(args.jobs),
           "--no-progress"]
    t0 = time.perf_counter()
    with open(base / "grader.log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        hwm = 0
        while proc.poll() is None:
            hwm = max(hwm, _hwm_kib(proc.pid))
            time.sleep(0.2)
    wall = time.perf_counter() - t0
    children_max_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if proc.returncode != 0:
        print((base / "grader.log").read_text()[-3000:])
        raise SystemExit(f"the grader failed with exit status {proc.returncode}")
    with open(out / "grades.csv", newline="") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    summary = json.loads((out / "summary.json").read_text())
    max_score = summary["max_score"]
    scores = {k: {int(rows[s]["score"]) for s in rows if kinds[s] == k} for k in ("full", "partial", "stub")}
    correct = (scores["full"] == {max_score} and scores["stub"] == {0} and len(scores["partial"]) == 1
               and 0 < next(iter(scores["partial"])) < max_score and len(rows) == args.submissions)
    print(f"{args.submissions} submissions ({', '.join(f'{sum(1 for v in kinds.values() if v == k)} {k}' for k in scores)}), "
          f"{len(summary['chapters'])} chapters, {max_score} points, --jobs {args.jobs}, {os.cpu_count()} CPUs, "
          f"sandbox {summary['sandbox']['mode']}")
    print(f"scores: full {sorted(scores['full'])}, partial {sorted(scores['partial'])}, stub {sorted(scores['stub'])}"
          f" -> {'as expected' if correct else 'WRONG'}")
    print(f"wall time: {wall:.1f} s (before the isolation redesign {BEFORE_REDESIGN_S} s: "
          f"{wall / BEFORE_REDESIGN_S:.2f}x; target <= 130 s)")
    print(f"grader peak memory: {hwm / 1024:.0f} MiB (target < 1024 MiB); largest child: {children_max_kib / 1024:.0f} MiB")
    alone = crowded = None
    if not args.no_fairness:
        alone, crowded = _fairness(base, args.jobs)
        print(f"fairness: honest submission alone {alone:.1f} s, next to 16 setsid spinners {crowded:.1f} s "
              f"({crowded / alone:.2f}x; target <= 1.5x)")
    print(json.dumps({
        "submissions": args.submissions, "jobs": args.jobs, "wall_s": round(wall, 1),
        "ratio_to_before": round(wall / BEFORE_REDESIGN_S, 2),
        "grader_peak_mib": round(hwm / 1024, 1), "largest_child_peak_mib": round(children_max_kib / 1024, 1),
        "scores_as_expected": correct, "max_score": max_score, "chapters": len(summary["chapters"]),
        "sandbox": summary["sandbox"]["mode"], "under_130_s": wall <= 130, "under_1_gb": hwm < 1024 * 1024,
        "honest_alone_s": alone, "honest_next_to_spinners_s": crowded,
    }))
    if args.keep is None:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

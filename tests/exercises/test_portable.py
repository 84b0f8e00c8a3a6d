"""The student's side runs where signal and os lack their POSIX-only names, as on Windows.

The check command and its child process (``course_exercises.check`` and
``course_exercises.check_runner``) must give the same points when ``signal``
has no ``SIGALRM``/``setitimer`` and ``os`` no ``killpg``/``fork``/``setsid``...:
here both processes run with those names deleted (the child through a
``sitecustomize`` module on ``PYTHONPATH``, which proves it ran by writing a
file), and the per-case time limit and the kill of the whole run still work.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import nbformat
import pytest

from course_exercises import check
from course_exercises.check import load_cases

ROOT = Path(__file__).resolve().parents[2]
cases = load_cases()

#: names Windows' Python lacks, of those a checker might reach for. The ones the standard library's own
#: POSIX subprocess code uses stay (os.waitpid, os.WNOHANG, signal.SIGKILL for Popen.kill): on Windows
#: subprocess has an implementation of its own, which needs none of them.
POSIX_ONLY = {
    "signal": ("SIGALRM", "setitimer", "getitimer", "ITIMER_REAL", "alarm", "pause", "siginterrupt"),
    "os": ("killpg", "getpgid", "setpgid", "setsid", "getsid", "fork", "forkpty"),
}

SITECUSTOMIZE = f"""
import os, signal
for module, names in {POSIX_ONLY!r}.items():
    for name in names:
        if hasattr(globals()[module], name):
            delattr(globals()[module], name)
with open(os.environ["POSIX_NAMES_REMOVED"], "a") as fh:
    fh.write("removed\\n")
"""


def _without_posix_names(monkeypatch, tmp_path: Path) -> Path:
    """Delete the POSIX-only names here and in every Python started from here; the marker file it writes."""
    for module, names in (("signal", POSIX_ONLY["signal"]), ("os", POSIX_ONLY["os"])):
        for name in names:
            monkeypatch.delattr({"signal": signal, "os": os}[module], name, raising=False)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    marker = tmp_path / "removed.txt"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("POSIX_NAMES_REMOVED", str(marker))
    return marker


def _solutions_with(tmp_path: Path, chapter: str, function: str, body: str) -> Path:
    """solutions/<chapter> copied into tmp_path/nb, with ``function``'s body replaced by ``body``."""
    folder = tmp_path / "nb"
    folder.mkdir(exist_ok=True)
    name = cases.NOTEBOOKS[chapter]
    nb = nbformat.read(ROOT / "solutions" / name, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.startswith(f"def {function}("):
            signature = cell.source.split("\n")[0]  # the cell holds the one function; its signature is one line
            cell.source = "\n".join([signature] + ["    " + ln for ln in body.split("\n")])
    nbformat.write(nb, folder / name)
    return folder


def _points(out: str) -> dict[str, str]:
    """``{"8.1": "0/8", ...}`` from the check command's table."""
    return dict(re.findall(r"^\s*(\d+\.\d+)\s+\w+\s+(\d+/\d+)", out, flags=re.M))


def test_same_points_without_the_posix_only_names(tmp_path, monkeypatch, capsys):
    """An endless loop in 8.1 is stopped by the per-case limit; 8.2-8.4 (the reference answers) keep every point."""
    folder = _solutions_with(tmp_path, "08", "padding_mask", "while True:\n    pass")
    assert check.main(["08", "--notebooks", str(folder), "--case-timeout", "1"]) == 0
    usual = capsys.readouterr().out
    marker = _without_posix_names(monkeypatch, tmp_path)
    assert not hasattr(signal, "SIGALRM") and not hasattr(os, "killpg")
    assert check.main(["08", "--notebooks", str(folder), "--case-timeout", "1"]) == 0
    windows = capsys.readouterr().out
    assert marker.read_text().count("removed") >= 1  # the child ran without the names too
    points = _points(usual)
    assert points == _points(windows) and set(points) == {"8.1", "8.2", "8.3", "8.4"}, (usual, windows)
    total = {ex: sum(c.points for c in cases.CASES if c.exercise == ex) for ex in points}
    assert points["8.1"] == f"0/{total['8.1']}"
    assert all(points[ex] == f"{total[ex]}/{total[ex]}" for ex in ("8.2", "8.3", "8.4")), points
    assert "did not finish within the time limit (1 s)" in windows, windows


def test_the_whole_run_is_killed_without_the_posix_only_names(tmp_path, monkeypatch, capsys):
    """A loop that swallows the per-case timeout is stopped by the kill of the whole run; finished cases count."""
    folder = _solutions_with(tmp_path, "08", "causal_mask",
                             "while True:\n    try:\n        while True:\n            pass\n"
                             "    except BaseException:\n        pass")
    marker = _without_posix_names(monkeypatch, tmp_path)
    assert check.main(["08", "--notebooks", str(folder), "--case-timeout", "1", "--timeout", "30"]) == 0
    out = capsys.readouterr().out
    assert marker.read_text().count("removed") >= 1
    points = _points(out)
    total = {ex: sum(c.points for c in cases.CASES if c.exercise == ex) for ex in ("8.1", "8.2")}
    assert points["8.1"] == f"{total['8.1']}/{total['8.1']}", out  # finished before the loop
    assert points["8.2"] == f"0/{total['8.2']}", out
    assert "did not finish within 30 s" in out, out


def test_time_limit_stops_a_loop_in_any_thread():
    """The watchdog needs neither signals nor the main thread."""
    import threading
    import time

    from course_exercises.check_runner import CaseTimeout, time_limit

    outcome = []

    def work():
        start = time.monotonic()
        try:
            with time_limit(0.5):
                while True:
                    pass
        except CaseTimeout:
            outcome.append(time.monotonic() - start)
        with time_limit(5):  # a limit that is not reached raises nothing, now or later
            sum(range(1000))
        time.sleep(0.2)
        outcome.append("clean")

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(30)
    assert len(outcome) == 2 and 0.4 < outcome[0] < 10 and outcome[1] == "clean", outcome


@pytest.mark.skipif(sys.platform == "win32", reason="checks the POSIX names exist to be removed")
def test_the_names_removed_exist_here():
    """Otherwise the tests above would remove nothing and prove nothing."""
    assert hasattr(signal, "SIGALRM") and hasattr(signal, "setitimer") and hasattr(os, "killpg")

"""The grading run: reference values from ``solutions/``, then every submission.

This module is the parent side of the grader (see :mod:`course_lib.grading.cli`
for the command). It never imports or runs student code - and does not even
import torch: the cases are run by children (:mod:`.child`), which only write
arrays. The parent:

1. runs the cases on the course's ``solutions/`` in a child, in the same
   sandbox as the students, checks those arrays against the cases' own
   independent ``expected()`` values, and stores them with a **manifest**
   (case ids, points, tolerances, hints, and each array's SHA-256) whose own
   SHA-256 identifies the grading;
2. for each submission: reads only its notebooks (:mod:`.intake`), flags
   structural problems by parsing (:mod:`.static_checks`), runs the cases in a
   child (:mod:`.sandbox`), and scores each case by comparing the arrays read
   back with pickling disabled against the reference (:mod:`.compare`).

Source: the autograder issue and the exercise/grader contract
(``tests/exercises/CONTRACT.md``).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from .compare import ResultError, compare_arrays, judge_case, open_dir, read_case_dir
from .intake import IntakeLimits, Submission, collect_notebooks
from .report import StudentResult
from .sandbox import (ChildRun, Limits, SandboxInfo, Supervisor, child_sys_path, make_workdir, remove_tree,
                      run_chapters)
from .extract import rename_cells
from .static_checks import check_source

__all__ = ["GradingConfig", "Reference", "ReferenceError", "build_reference", "grade_submission", "cases_notebooks"]

MANIFEST_FORMAT = "course-grader-manifest/1"
_CASE_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._-]{0,99}$")
_KEY = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}$")
_MEMORY_WORDS = ("MemoryError", "can't allocate memory", "Cannot allocate memory", "bad_alloc", "out of memory")


class ReferenceError(RuntimeError):
    """The reference run on ``solutions/`` failed: the grading cannot start."""


@dataclass
class GradingConfig:
    """Settings of one grading run.

    Attributes:
        out_dir: the report folder (``--out``); never shown to a child.
        course_root: the repository (holds ``solutions/`` and ``tests/exercises/cases.py``).
        solutions_dir: the reference notebooks.
        cases_files: the course's ``cases.py`` first, then ``--extra-tests`` modules.
        chapters: two-digit chapters to grade (empty: every chapter of the cases).
        limits: per-submission limits of the children.
        intake: caps on reading submissions.
        jobs: submissions graded at once.
        force: regrade submissions already graded with the same hash.
        reference_manifest: an existing manifest to reuse if it still matches.
        hide: extra paths to hide from the children (the submissions' folders are added).
        sandbox: ``auto``/``namespaces``/``userns``/``plain``.
    """

    out_dir: Path
    course_root: Path
    solutions_dir: Path
    cases_files: list[Path]
    chapters: list[str] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)
    intake: IntakeLimits = field(default_factory=IntakeLimits)
    jobs: int = 1
    force: bool = False
    reference_manifest: Path | None = None
    hide: list[Path] = field(default_factory=list)
    sandbox: str = "auto"


@dataclass
class Reference:
    """The reference of a grading run, loaded in memory.

    Attributes:
        manifest: the manifest (see :func:`build_reference`).
        sha256: SHA-256 of the manifest file's bytes.
        path: the manifest file.
        arrays: case id -> key -> reference array.
    """

    manifest: dict
    sha256: str
    path: Path
    arrays: dict[str, dict[str, np.ndarray]]

    @property
    def cases(self) -> list[dict]:
        """The manifest's case entries (id, chapter, exercise, function, points, rtol, atol, hint, keys)."""
        return self.manifest["cases"]

    @property
    def notebooks(self) -> dict[str, str]:
        """chapter -> notebook file name, for the graded chapters."""
        return self.manifest["notebooks"]

    @property
    def chapters(self) -> list[str]:
        """The graded chapters, two digits each, in order."""
        return self.manifest["chapters"]

    def exercises(self) -> list[str]:
        """Exercise numbers in numeric order."""
        from .report import exercise_order

        return exercise_order([c["exercise"] for c in self.cases])


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------
def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def cases_notebooks(cases_files: list[Path]) -> dict[str, str]:
    """chapter -> notebook name, read from the ``NOTEBOOKS`` literal of each cases file by parsing it.

    Raises:
        ReferenceError: a cases file has no literal ``NOTEBOOKS`` dict and is the course's own.
    """
    out: dict[str, str] = {}
    for i, path in enumerate(cases_files):
        tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=str(path))
        found = None
        for node in tree.body:
            target = node.target if isinstance(node, ast.AnnAssign) else (
                node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
            if isinstance(target, ast.Name) and target.id == "NOTEBOOKS" and getattr(node, "value", None) is not None:
                try:
                    found = ast.literal_eval(node.value)
                except ValueError:
                    found = None
        if isinstance(found, dict):
            out.update({str(k): str(v) for k, v in found.items()})
        elif i == 0:
            raise ReferenceError(f"{path} has no literal NOTEBOOKS dict (chapter -> notebook file name)")
    return out


def grader_fingerprint() -> str:
    """SHA-256 over the grader's own source files (changes when the grader changes)."""
    h = hashlib.sha256()
    for p in sorted(Path(__file__).parent.glob("*.py")):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _versions() -> dict[str, str]:
    from importlib import metadata

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {"python": sys.version.split()[0], "numpy": np.__version__, "torch": version("torch"),
            "course": version("transformer-course")}


def _copy_readonly(src: Path, dst: Path) -> None:
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o644)


# ---------------------------------------------------------------------------
# Reference
# ---------------------------------------------------------------------------
def _inputs_key(config: GradingConfig, chapters: list[str], notebooks: dict[str, str]) -> dict:
    sols = {}
    for ch in chapters:
        p = config.solutions_dir / notebooks[ch]
        sols[notebooks[ch]] = _sha256_file(p) if p.is_file() else None
    return {
        "cases_sha256": [_sha256_file(p) for p in config.cases_files],
        "solutions_sha256": sols,
        "chapters": chapters,
        "grader_sha256": grader_fingerprint(),
        "versions": _versions(),
    }


def load_reference(manifest_path: Path, expect_inputs: dict | None = None) -> Reference | None:
    """Load a manifest and its arrays; ``None`` if missing, changed or damaged.

    Every array file must match the SHA-256 written in the manifest; with
    ``expect_inputs``, the manifest's ``inputs`` must equal it.
    """
    try:
        raw = manifest_path.read_bytes()
        manifest = json.loads(raw)
        if manifest.get("format") != MANIFEST_FORMAT:
            return None
        if expect_inputs is not None and manifest.get("inputs") != json.loads(json.dumps(expect_inputs)):
            return None
        base = manifest_path.parent
        arrays: dict[str, dict[str, np.ndarray]] = {}
        from .compare import read_array

        for case in manifest["cases"]:
            arrays[case["id"]] = {}
            for key, meta in case["keys"].items():
                data = (base / meta["file"]).read_bytes()
                if _sha256_bytes(data) != meta["sha256"]:
                    return None
                arrays[case["id"]][key] = read_array(data)
        return Reference(manifest, _sha256_bytes(raw), manifest_path, arrays)
    except (OSError, ValueError, KeyError, TypeError, ResultError):
        return None


def build_reference(config: GradingConfig, supervisor: Supervisor, info: SandboxInfo, work_base: Path,
                    log=print) -> Reference:
    """Compute (or reuse) the reference arrays by running the cases on ``solutions/``.

    The manifest (``DIR/_reference/manifest.json``) holds: ``format``,
    ``inputs`` (hashes of the cases files and solution notebooks, chapters,
    grader hash, versions - a change forces a rebuild), ``notebooks``,
    ``chapters``, ``max_score`` and ``cases`` (``id``, ``chapter``,
    ``exercise``, ``function``, ``points``, ``rtol``, ``atol``, ``hint``,
    ``requires`` and ``keys``: key -> ``file``, ``sha256``, ``dtype``, ``shape``).

    Raises:
        ReferenceError: a solution notebook is missing; the reference child
            failed; a case raised on the solutions, or its arrays disagree with
            the case's ``expected()`` (the message lists the cases).
    """
    notebooks = cases_notebooks(config.cases_files)
    chapters = config.chapters or sorted(notebooks)
    unknown = [c for c in chapters if c not in notebooks]
    if unknown:
        raise ReferenceError(f"--chapters {', '.join(unknown)}: no such chapter (known: {', '.join(sorted(notebooks))})")
    missing = [notebooks[c] for c in chapters if not (config.solutions_dir / notebooks[c]).is_file()]
    if missing:
        raise ReferenceError(f"solution notebooks missing in {config.solutions_dir}: {', '.join(missing)} "
                             f"(grade fewer chapters with --chapters)")
    inputs = _inputs_key(config, chapters, notebooks)
    ref_dir = config.out_dir / "_reference"
    for candidate in [config.reference_manifest, ref_dir / "manifest.json"]:
        if candidate is not None:
            ref = load_reference(Path(candidate), inputs)
            if ref is not None:
                log(f"reference: reusing {candidate} (sha256 {ref.sha256[:12]})")
                return ref
    log(f"reference: running the cases on {config.solutions_dir} ...")
    work = make_workdir(work_base, "reference-" + secrets.token_hex(8), info.drop)
    try:
        for ch in chapters:
            _copy_readonly(config.solutions_dir / notebooks[ch], work / "submission" / notebooks[ch])
        cases_files = []
        for i, p in enumerate(config.cases_files):
            dst = work / "tests" / ("cases.py" if i == 0 else f"extra_{i}.py")
            _copy_readonly(p, dst)
            cases_files.append(str(dst))
        limits = replace(config.limits, chapter_timeout_s=max(config.limits.chapter_timeout_s * 5, 300),
                         submission_timeout_s=max(config.limits.submission_timeout_s * 3, 1800), cpu_s=None)
        meta_path = work / "out" / "meta.json"
        run = run_chapters(work, supervisor=supervisor, info=info, limits=limits, sys_path=child_sys_path(),
                           cases_files=cases_files, chapters=chapters, hide=[], expected=True,
                           meta_path=str(meta_path))
        bad = {ch: s for ch, s in run.chapter_status.items() if s != "ok"}
        if bad or not meta_path.is_file():
            raise ReferenceError(f"the reference run on solutions/ failed: chapters {bad or 'unknown'}; "
                                 f"its stderr ends with:\n{run.stderr_tail[-2000:]}")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        manifest = _assemble_manifest(config, work, meta, chapters, notebooks, inputs, ref_dir)
    finally:
        remove_tree(work)
    raw = json.dumps(manifest, indent=1, sort_keys=True).encode()
    from .report import atomic_write

    atomic_write(ref_dir / "manifest.json", raw)
    ref = load_reference(ref_dir / "manifest.json", inputs)
    if ref is None:  # pragma: no cover - just written
        raise ReferenceError("the reference manifest could not be read back")
    log(f"reference: {len(ref.cases)} cases, {manifest['max_score']} points, manifest sha256 {ref.sha256[:12]}")
    return ref


def _assemble_manifest(config: GradingConfig, work: Path, meta: dict, chapters: list[str],
                       notebooks: dict[str, str], inputs: dict, ref_dir: Path) -> dict:
    from .report import atomic_write

    results_fd = open_dir(str(work / "out" / "results"))
    expected_fd = open_dir(str(work / "out" / "expected"))
    problems, cases, seen = [], [], set()
    arrays_dir = ref_dir / "arrays"
    if arrays_dir.exists():
        shutil.rmtree(arrays_dir)
    try:
        for c in meta["cases"]:
            cid = c["id"]
            if not isinstance(cid, str) or not _CASE_ID.match(cid) or cid in seen:
                problems.append(f"bad or duplicate case id {cid!r}")
                continue
            seen.add(cid)
            exp, exp_info = read_case_dir(expected_fd, cid, _list_keys(work / "out" / "expected" / cid))
            got, got_info = read_case_dir(results_fd, cid, _list_keys(work / "out" / "results" / cid))
            if got_info.get("error"):
                problems.append(f"{cid}: the solution raised {got_info['error']}")
                continue
            if exp_info.get("error"):
                problems.append(f"{cid}: expected() raised {exp_info['error']}")
                continue
            if not exp or set(exp) != set(got) or not all(_KEY.match(k) for k in exp):
                problems.append(f"{cid}: the solution produced keys {sorted(got)}, expected() gives {sorted(exp)}")
                continue
            keys = {}
            for key in sorted(exp):
                g, e = got[key], exp[key]
                if isinstance(g, ResultError) or isinstance(e, ResultError):
                    problems.append(f"{cid}/{key}: {g if isinstance(g, ResultError) else e}")
                    continue
                msg = compare_arrays(key, g, e, float(c["rtol"]), float(c["atol"]))
                if msg:
                    problems.append(f"{cid}: solutions disagree with expected(): {msg}")
                    continue
                buf = _npy_bytes(g)
                rel = f"arrays/{cid}/{key}.npy"
                atomic_write(ref_dir / rel, buf)
                keys[key] = {"file": rel, "sha256": _sha256_bytes(buf), "dtype": str(g.dtype), "shape": list(g.shape)}
            if len(keys) == len(exp):
                entry = {k: c[k] for k in ("id", "chapter", "exercise", "function", "points", "requires", "rtol",
                                           "atol", "hint")}
                entry["points"] = int(entry["points"])
                entry["keys"] = keys
                cases.append(entry)
    finally:
        os.close(results_fd)
        os.close(expected_fd)
    if problems:
        raise ReferenceError("the solutions do not pass their own cases:\n  " + "\n  ".join(problems[:40]))
    if not cases:
        raise ReferenceError(f"no cases for chapters {', '.join(chapters)}")
    return {
        "format": MANIFEST_FORMAT,
        "inputs": inputs,
        "notebooks": {ch: notebooks[ch] for ch in chapters},
        "chapters": chapters,
        "child_versions": meta.get("versions", {}),
        "max_score": sum(c["points"] for c in cases),
        "cases": cases,
    }


def _list_keys(case_dir: Path) -> list[str]:
    try:
        return sorted(p.name[:-4] for p in case_dir.iterdir() if p.name.endswith(".npy"))
    except OSError:
        return []


def _npy_bytes(arr: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


# ---------------------------------------------------------------------------
# One submission
# ---------------------------------------------------------------------------
def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _exercise_maxima(ref: Reference) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in ref.cases:
        out[c["exercise"]] = out.get(c["exercise"], 0) + int(c["points"])
    return out


def invalid_result(sub: Submission, ref: Reference, reason: str, runtime: float = 0.0) -> StudentResult:
    """The result of a submission that cannot be graded: 0 points, every case listed."""
    cases = [{"case_id": c["id"], "exercise": c["exercise"], "function": c["function"], "points": 0,
              "max_points": int(c["points"]), "passed": False, "child_error": None,
              "message": f"Exercise {c['exercise']} ({c['function']}), case {c['id']}: not graded - {reason}"}
             for c in ref.cases]
    return StudentResult(
        student=sub.student, submission_hash=sub.sha256, manifest_hash=ref.sha256, status="invalid submission",
        score=0, max_score=int(ref.manifest["max_score"]), exercises={e: 0 for e in _exercise_maxima(ref)},
        exercises_max=_exercise_maxima(ref), cases=cases, flags=list(sub.flags),
        notes=[f"Invalid submission: {reason}."], runtime=runtime, graded_at=_now())


def grade_submission(sub: Submission, ref: Reference, config: GradingConfig, supervisor: Supervisor,
                     info: SandboxInfo, work_base: Path) -> StudentResult:
    """Grade one submission (never raises for anything the submission does).

    Returns:
        the :class:`StudentResult`; its per-student files are written by the caller.
    """
    start = time.monotonic()
    collect_notebooks(sub, ref.notebooks, ref.chapters, config.intake)
    if sub.invalid:
        return invalid_result(sub, ref, sub.invalid, time.monotonic() - start)
    flags = list(sub.flags)
    notes: list[str] = []
    work = make_workdir(work_base, secrets.token_hex(12), info.drop)
    supervisor.owners[str(work / "home")] = sub.student
    try:
        present = []
        for ch in ref.chapters:
            if ch in sub.notebooks:
                dst = work / "submission" / ref.notebooks[ch]
                dst.write_bytes(sub.notebooks[ch])
                os.chmod(dst, 0o644)
                present.append(ch)
            else:
                notes.append(f"{ref.notebooks[ch]} is missing from the submission: its exercises score 0.")
        flags.extend(_static_flags(work, ref, present))
        cases_files = []
        for i, p in enumerate(config.cases_files):
            dst = work / "tests" / ("cases.py" if i == 0 else f"extra_{i}.py")
            _copy_readonly(p, dst)
            cases_files.append(str(dst))
        hide = [str(p) for p in [config.solutions_dir, config.out_dir, config.course_root / ".git", *config.hide]]
        if config.reference_manifest is not None:
            hide.append(str(Path(config.reference_manifest).parent))
        run = run_chapters(work, supervisor=supervisor, info=info, limits=config.limits, sys_path=child_sys_path(),
                           cases_files=cases_files, chapters=present, hide=hide) if present else ChildRun()
        for ch in ref.chapters:
            if ch not in present:
                run.chapter_status[ch] = "missing"
        result = _judge(sub, ref, work, run, flags, notes, config.limits)
    finally:
        remove_tree(work)
    result.runtime = time.monotonic() - start
    return result


def _static_flags(work: Path, ref: Reference, chapters: list[str]) -> list[str]:
    from .extract import SubmissionError, extract_source

    out = []
    for ch in chapters:
        exercises = {c["exercise"]: c["function"] for c in ref.cases if c["chapter"] == ch}
        try:
            source = extract_source(work / "submission" / ref.notebooks[ch])
        except SubmissionError:
            continue  # the child reports it to the student
        except Exception as exc:  # noqa: BLE001 - parsing odd input must not stop the grading
            out.append(f"unparsed ch{ch}: {type(exc).__name__}")
            continue
        notebook = work / "submission" / ref.notebooks[ch]
        out.extend(rename_cells(str(f), notebook) for f in check_source(source, ch, exercises))
    return out


def _strip_workdir(text: str, work: Path) -> str:
    """Show ``06_feed_forward.ipynb`` instead of the sandbox's temporary path to it."""
    for base in {str(work / "submission"), os.path.realpath(work / "submission")}:
        text = text.replace(base + os.sep, "")
    return text


def _judge(sub: Submission, ref: Reference, work: Path, run: ChildRun, flags: list[str],
           notes: list[str], limits: Limits) -> StudentResult:
    try:
        results_fd = open_dir(str(work / "out" / "results"))
    except OSError:
        results_fd = None
    verdicts = []
    try:
        for c in ref.cases:
            status = run.chapter_status.get(c["chapter"])
            if status == "missing":
                v = judge_case(c, None, ref.arrays[c["id"]])
                v.message = (f"Exercise {c['exercise']} ({c['function']}), case {c['id']}: "
                             f"the notebook {ref.notebooks[c['chapter']]} is not in the submission.")
            else:
                v = judge_case(c, results_fd, ref.arrays[c["id"]], status)
                # the student's own file names and the "code cell N" numbering of the check command
                notebook = work / "submission" / ref.notebooks[c["chapter"]]
                v.message = rename_cells(_strip_workdir(v.message, work), notebook)
                if v.child_error:
                    v.child_error = rename_cells(_strip_workdir(v.child_error, work), notebook)
            verdicts.append(v)
    finally:
        if results_fd is not None:
            os.close(results_fd)
    memory = run.memory_signs or any(
        v.child_error and any(w in v.child_error for w in _MEMORY_WORDS) for v in verdicts)
    statuses = set(run.chapter_status.values())
    status = "timeout" if "timeout" in statuses else "memory" if memory else "crashed" if "crashed" in statuses else "ok"
    for ch, s in sorted(run.chapter_status.items()):
        if s == "timeout":
            notes.append(f"Chapter {ch}: stopped after the time limit (an endless loop or very slow code?); "
                         f"its unfinished cases score 0.")
        elif s == "crashed":
            notes.append(f"Chapter {ch}: the process stopped unexpectedly (sys.exit, os._exit, a crash or too much "
                         f"memory); the cases it had not finished score 0.")
    if memory:
        notes.append(f"Your code ran out of memory (the limit is {limits.memory_mb} MiB of address space).")
    if run.output_cut:
        notes.append("Your code printed too much: the output was cut at the size limit (this costs no points).")
    if run.killed_strays:
        flags.append(f"left {run.killed_strays} process(es) running after the child ended (killed)")
    exercises: dict[str, int] = {}
    for v in verdicts:
        exercises[v.exercise] = exercises.get(v.exercise, 0) + v.points
    return StudentResult(
        student=sub.student, submission_hash=sub.sha256, manifest_hash=ref.sha256, status=status,
        score=sum(v.points for v in verdicts), max_score=int(ref.manifest["max_score"]), exercises=exercises,
        exercises_max=_exercise_maxima(ref), cases=[asdict(v) for v in verdicts], flags=flags, notes=notes,
        chapter_status=dict(run.chapter_status), runtime=run.seconds, stderr_tail=run.stderr_tail[-1500:],
        graded_at=_now())


def previous_result(out_dir: Path, sub: Submission, ref: Reference) -> StudentResult | None:
    """The stored result of an unchanged submission graded against the same manifest, else ``None``."""
    path = out_dir / sub.student / "grade.json"
    try:
        r = StudentResult.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None
    if r.submission_hash != sub.sha256 or r.manifest_hash != ref.sha256:
        return None
    r.reused = True
    return r


def new_work_base() -> Path:
    """A private folder for the children's work folders: listable only by its owner (mode 0711)."""
    base = Path(tempfile.mkdtemp(prefix="course-grade-"))
    os.chmod(base, 0o711)
    return base

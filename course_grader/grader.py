"""The grading run: reference values from ``solutions/``, then every submission.

This module is the parent side of the grader (see :mod:`course_grader.cli`
for the command). It never imports or runs student code - and does not even
import torch: the cases run in children (:mod:`.child`), which only send arrays.

1. **Reference.** A secret salt is drawn for the grading run. A child runs the
   cases on the course's ``solutions/`` with inputs drawn from that salt,
   checks them against the cases' independent ``expected()`` values, and sends
   the inputs and the solution's arrays. They are stored with a **manifest**
   (case ids, points, tolerances, hints, each array's SHA-256) whose own
   SHA-256 identifies the grading.
2. **Submissions.** For each one the parent reads only its notebooks' bytes
   (:mod:`.intake`), has them parsed for advisory flags and cell numbers in a
   bounded subprocess (:mod:`.inspect_notebooks`), and runs
   the cases in a sandboxed child (:mod:`.sandbox`) that gets the *student
   copy* of the cases (:mod:`.casefile`: no expected value) and the drawn
   inputs as data - never the salt, the solutions or the reference arrays. Each
   case is scored by comparing what the child sent, within its chapter's time
   on the parent's clock, with the reference for exactly those inputs
   (:mod:`.compare`).

Design and threat model: ``course_grader/SECURITY.md``; the exercise/grader contract
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

from course_exercises.casefile import CASES_DIR, StripRefused, cases_source, student_copy
from course_exercises.compare import (REJECTION_ALONE, ResultError, compare_arrays, decode_arrays, judge_case,
                                      raised_memory_error, read_array, read_input_array, unearned_passes)
from .intake import IntakeLimits, Submission, collect_notebooks
from .report import StudentResult, atomic_write
from .sandbox import (ChildRun, ChildSpec, Limits, PlanError, SandboxInfo, Supervisor, child_sys_path,
                      make_workdir, needed_paths, nobody_can_reach, remove_tree, run_chapters)
from .inspect_notebooks import ChapterInspection, inspect_notebooks, rename_cells_with

__all__ = ["GradingConfig", "Reference", "ReferenceRunError", "build_reference", "grade_submission", "cases_notebooks",
           "load_reference", "invalid_result", "previous_result", "new_work_base", "grader_fingerprint", "versions",
           "reachable_by_nobody", "hidden_paths", "MANIFEST_FORMAT"]

MANIFEST_FORMAT = "course-grader-manifest/2"
_CASE_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._-]{0,99}$")
_KEY = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}$")


class ReferenceRunError(RuntimeError):
    """The reference run on ``solutions/`` failed: the grading cannot start."""


@dataclass
class GradingConfig:
    """Settings of one grading run.

    Attributes:
        out_dir: the report folder (``--out``); never shown to a child.
        course_root: the course repository the command runs from (``None`` outside a clone); every
            folder in it but the imported packages (:data:`CHILD_PACKAGES`) is hidden from the children.
        solutions_dir: the reference notebooks.
        cases_files: the course's ``registry.py`` (the package's
            :data:`~course_exercises.casefile.CASES_FILE` unless ``--cases``) first, then
            ``--extra-tests`` modules.
        chapters: two-digit chapters to grade (empty: every chapter of the cases).
        limits: per-submission limits of the children.
        intake: caps on reading submissions.
        jobs: submissions graded at once.
        force: regrade submissions already graded with the same hash.
        reference_manifest: an existing manifest to reuse if it still matches (its
            drawn inputs too: without it every run draws new ones).
        hide: extra paths to hide from the children (the submissions' folders are added).
        sandbox: ``auto``/``namespaces``/``userns``/``unsafe``.
    """

    out_dir: Path
    course_root: Path | None
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
        draws: case id -> input key -> the drawn input (handed to every child).
        student_cases: the student copies of the cases files (sources).
    """

    manifest: dict
    sha256: str
    path: Path
    arrays: dict[str, dict[str, np.ndarray]]
    draws: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    student_cases: list[str] = field(default_factory=list)

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
        ReferenceRunError: a cases file has no literal ``NOTEBOOKS`` dict and is the course's own.
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
            raise ReferenceRunError(f"{path} has no literal NOTEBOOKS dict (chapter -> notebook file name)")
    return out


def grader_fingerprint() -> str:
    """SHA-256 over the grader's own source files and the case framework it shares with the checker
    (``course_grader/*.py``, ``course_exercises/*.py``; changes when either changes)."""
    h = hashlib.sha256()
    for folder in (Path(__file__).parent, CASES_DIR.parent):
        for p in sorted(folder.glob("*.py")):
            h.update(f"{folder.name}/{p.name}".encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def versions() -> dict[str, str]:
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
        "cases_sha256": [hashlib.sha256(_cases_text(p).encode()).hexdigest() for p in config.cases_files],
        "solutions_sha256": sols,
        "chapters": chapters,
        "grader_sha256": grader_fingerprint(),
        "versions": versions(),
    }


def load_reference(manifest_path: Path, expect_inputs: dict | None = None) -> Reference | None:
    """Load a manifest, its reference arrays and drawn inputs; ``None`` if missing, changed or damaged.

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
        draws: dict[str, dict[str, np.ndarray]] = {}
        for case in manifest["cases"]:
            arrays[case["id"]] = _load_arrays(base, case["keys"], read_array)
            draws[case["id"]] = _load_arrays(base, case.get("draws", {}), read_input_array)
        return Reference(manifest, _sha256_bytes(raw), manifest_path, arrays, draws)
    except (OSError, ValueError, KeyError, TypeError, ResultError):
        return None


def _load_arrays(base: Path, entries: dict, reader) -> dict[str, np.ndarray]:
    out = {}
    for key, meta in entries.items():
        data = (base / meta["file"]).read_bytes()
        if _sha256_bytes(data) != meta["sha256"]:
            raise ValueError(f"{meta['file']} changed")
        out[key] = reader(data)
    return out


def build_reference(config: GradingConfig, supervisor: Supervisor, info: SandboxInfo, work_base: Path,
                    log=print) -> Reference:
    """Draw this run's inputs and compute the reference arrays by running the cases on ``solutions/``.

    The manifest (``DIR/_reference/manifest.json``) holds: ``format``,
    ``inputs`` (hashes of the cases files and solution notebooks, chapters,
    grader hash, versions), ``notebooks``, ``chapters``, ``max_score``,
    ``student_cases`` (the cases files) and ``cases`` (``id``, ``chapter``,
    ``exercise``, ``function``, ``points``, ``rtol``, ``atol``, ``hint``,
    ``requires``, ``keys``: key -> ``file``, ``sha256``, ``dtype``, ``shape``;
    ``draws``: input key -> ``file``, ``sha256``). Only ``--reference`` reuses
    a manifest (and so its inputs); otherwise every run draws anew.

    Raises:
        ReferenceRunError: a solution notebook is missing; the reference child
            failed; a case raised on the solutions, or its arrays disagree with
            the case's ``expected()`` on every draw (the message lists the cases).
    """
    notebooks = cases_notebooks(config.cases_files)
    chapters = config.chapters or sorted(notebooks)
    unknown = [c for c in chapters if c not in notebooks]
    if unknown:
        raise ReferenceRunError(f"--chapters {', '.join(unknown)}: no such chapter "
                                f"(known: {', '.join(sorted(notebooks))})")
    missing = [notebooks[c] for c in chapters if not (config.solutions_dir / notebooks[c]).is_file()]
    if missing:
        raise ReferenceRunError(f"solution notebooks missing in {config.solutions_dir}: {', '.join(missing)} "
                             f"(grade fewer chapters with --chapters)")
    inputs = _inputs_key(config, chapters, notebooks)
    if config.reference_manifest is not None:
        ref = load_reference(Path(config.reference_manifest), inputs)
        if ref is None:
            raise ReferenceRunError(f"--reference {config.reference_manifest}: missing, damaged or made for other "
                                 f"cases, solutions, chapters or grader version")
        log(f"reference: reusing {config.reference_manifest} (sha256 {ref.sha256[:12]}), with its drawn inputs")
        ref.student_cases = _student_copies(config.cases_files)
        return ref
    log(f"reference: drawing this run's inputs and running the cases on {config.solutions_dir} ...")
    ref_dir = config.out_dir / "_reference"
    work = make_workdir(work_base, "reference-" + secrets.token_hex(8), info.drop)
    try:
        for ch in chapters:
            _copy_readonly(config.solutions_dir / notebooks[ch], work / "submission" / notebooks[ch])
        cases_files, check_files = [], []
        for i, (p, copy) in enumerate(zip(config.cases_files, _student_copies(config.cases_files))):
            dst = work / "tests" / ("cases.py" if i == 0 else f"extra_{i}.py")
            dst.write_text(_cases_text(p), encoding="utf-8")  # the registry and its chapter files, as one
            os.chmod(dst, 0o644)
            cases_files.append(str(dst))
            (work / "tests" / f"student_copy_{i}.py").write_text(copy, encoding="utf-8")
            check_files.append(str(work / "tests" / f"student_copy_{i}.py"))
        limits = replace(config.limits, chapter_timeout_s=max(config.limits.chapter_timeout_s * 5, 300),
                         submission_timeout_s=max(config.limits.submission_timeout_s * 3, 1800), cpu_s=None)
        spec = ChildSpec("reference", cases_files=cases_files, salt=secrets.token_hex(16), check_files=check_files)
        try:
            run = run_chapters(work, spec, supervisor=supervisor, info=info, limits=limits,
                               sys_path=child_sys_path(), chapters=chapters, case_ids={})
        except PlanError as exc:
            raise ReferenceRunError(f"the cases' stand-ins cannot be ordered: {exc}") from None
        if run.ready.get("leaks"):
            raise ReferenceRunError("the student copy of a cases file still carries expected values, which the "
                                 "student's process would hold: " + "; ".join(map(str, run.ready["leaks"]))
                                 + ". Register cases with Case(...) or _add(...) under those names, or pass "
                                 "expected= (and robust=) as keyword arguments.")
        bad = {ch: st for ch, st in run.chapter_status.items() if st != "ok"}
        if bad or not run.ready.get("cases"):
            raise ReferenceRunError(f"the reference run on solutions/ failed: chapters {bad or 'unknown'}; "
                                 f"its stderr ends with:\n{run.stderr_tail[-2000:]}")
        manifest = _assemble_manifest(config, run, chapters, notebooks, inputs, ref_dir)
    finally:
        remove_tree(work)
    atomic_write(ref_dir / "manifest.json", json.dumps(manifest, indent=1, sort_keys=True).encode())
    ref = load_reference(ref_dir / "manifest.json", inputs)
    if ref is None:  # pragma: no cover - just written
        raise ReferenceRunError("the reference manifest could not be read back")
    ref.student_cases = _student_copies(config.cases_files)
    log(f"reference: {len(ref.cases)} cases, {manifest['max_score']} points, manifest sha256 {ref.sha256[:12]}")
    return ref


def _cases_text(path: Path) -> str:
    """A cases file with the parts its ``PARTS`` names (the course's registry and its chapter files), as one source."""
    try:
        return cases_source(path)
    except SyntaxError as exc:
        raise ReferenceRunError(f"a cases file is not valid Python: {exc}") from None
    except (OSError, ValueError) as exc:
        raise ReferenceRunError(f"the cases file {path} cannot be read with its parts: {exc}") from None


def _student_copies(cases_files: list[Path]) -> list[str]:
    """The cases files as the student's process gets them: every expected value removed (:mod:`.casefile`),
    the course's registry with all its chapter files in one copy."""
    copies = []
    for p in cases_files:
        try:
            copies.append(student_copy(_cases_text(p), str(p)))
        except SyntaxError as exc:
            raise ReferenceRunError(f"a cases file is not valid Python: {exc}") from None
        except StripRefused as exc:
            raise ReferenceRunError(f"the student copy of a cases file cannot be made safely, so grading does not "
                                    f"start: {exc}") from None
    return copies


def _store_arrays(ref_dir: Path, folder: str, arrays: dict[str, np.ndarray]) -> dict:
    """Write each array as ``folder/N.npy`` under ``ref_dir``; the manifest entries."""
    entries = {}
    for n, key in enumerate(sorted(arrays)):
        buf = _npy_bytes(arrays[key])
        rel = f"{folder}/{n}.npy"
        atomic_write(ref_dir / rel, buf)
        entries[key] = {"file": rel, "sha256": _sha256_bytes(buf), "dtype": str(arrays[key].dtype),
                        "shape": list(arrays[key].shape)}
    return entries


def _reference_problems(cid: str, message: dict | None) -> tuple[list[str], dict, dict]:
    """Check one case's reference message; ``(problems, solution arrays, drawn inputs)``."""
    if not isinstance(message, dict):
        return [f"{cid}: no result from the solutions"], {}, {}
    if message.get("error"):
        return [f"{cid}: {message['error']}"], {}, {}
    got, exp = decode_arrays(message.get("arrays")), decode_arrays(message.get("expected"))
    draws = decode_arrays(message.get("inputs"), read_input_array)
    problems = [f"{cid}/{k}: {v}" for k, v in {**got, **exp, **draws}.items() if isinstance(v, ResultError)]
    if not exp or set(exp) != set(got) or not all(_KEY.match(k) for k in exp):
        problems.append(f"{cid}: the solution produced keys {sorted(got)}, expected() gives {sorted(exp)}")
    return problems, got, {"expected": exp, "draws": draws}


def _assemble_manifest(config: GradingConfig, run: ChildRun, chapters: list[str], notebooks: dict[str, str],
                       inputs: dict, ref_dir: Path) -> dict:
    if ref_dir.exists():
        remove_tree(ref_dir)
    problems, cases, seen = [], [], set()
    for c in run.ready["cases"]:
        cid = c.get("id")
        if c.get("chapter") not in chapters:
            continue
        if not isinstance(cid, str) or not _CASE_ID.match(cid) or cid in seen:
            problems.append(f"bad or duplicate case id {cid!r}")
            continue
        seen.add(cid)
        found, got, extra = _reference_problems(cid, run.results.get(cid))
        if not found:
            found = [f"{cid}: solutions disagree with expected(): {msg}" for key in sorted(got)
                     if (msg := compare_arrays(key, got[key], extra["expected"][key], float(c["rtol"]), float(c["atol"])))]
        if found:
            problems.extend(found)
            continue
        entry = {k: c[k] for k in ("id", "chapter", "exercise", "function", "points", "requires", "rtol", "atol", "hint")}
        entry["points"] = int(entry["points"])
        standins = c.get("standins") or {}
        if not isinstance(standins, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                     for k, v in standins.items()):
            problems.append(f"{cid}: malformed stand-ins")
            continue
        entry["standins"] = dict(standins)  # the course's sources; sent to a student's child in a later unit only
        entry["keys"] = _store_arrays(ref_dir, f"arrays/{cid}", got)
        entry["draws"] = _store_arrays(ref_dir, f"draws/{cid}", extra["draws"])
        cases.append(entry)
    if problems:
        raise ReferenceRunError("the solutions do not pass their own cases:\n  " + "\n  ".join(problems[:40]))
    if not cases:
        raise ReferenceRunError(f"no cases for chapters {', '.join(chapters)}")
    return {
        "format": MANIFEST_FORMAT,
        "inputs": inputs,
        "notebooks": {ch: notebooks[ch] for ch in chapters},
        "chapters": chapters,
        "child_versions": run.ready.get("versions", {}),
        "max_score": sum(c["points"] for c in cases),
        "cases": cases,
    }


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
        inspected = inspect_notebooks(
            {ch: work / "submission" / ref.notebooks[ch] for ch in present},
            {ch: {c["exercise"]: c["function"] for c in ref.cases if c["chapter"] == ch} for ch in present},
            spawn=supervisor.spawn, kill=supervisor.kill_tree)
        for ch in present:
            flags.extend(inspected[ch].flags)
        spec = ChildSpec("student", cases_files=_write_child_files(work, ref, present), hide=hidden_paths(config))
        case_ids = {ch: {c["id"] for c in ref.cases if c["chapter"] == ch} for ch in present}
        run = run_chapters(work, spec, supervisor=supervisor, info=info, limits=config.limits,
                           sys_path=child_sys_path(), chapters=present, case_ids=case_ids,
                           cases=ref.cases) if present else ChildRun()
        for ch in ref.chapters:
            if ch not in present:
                run.chapter_status[ch] = "missing"
        result = _judge(sub, ref, work, run, flags, notes, config.limits, inspected)
    finally:
        remove_tree(work)
    result.runtime = time.monotonic() - start
    return result


def _write_child_files(work: Path, ref: Reference, chapters: list[str]) -> list[str]:
    """Write the student copies of the cases files and each chapter's drawn inputs; the cases files' paths."""
    paths = []
    for i, source in enumerate(ref.student_cases):
        dst = work / "tests" / ("cases.py" if i == 0 else f"extra_{i}.py")
        dst.write_text(source, encoding="utf-8")
        os.chmod(dst, 0o644)
        paths.append(str(dst))
    for ch in chapters:
        index, arrays = {}, {}
        for c in ref.cases:
            if c["chapter"] != ch:
                continue
            index[c["id"]] = {}
            for key, value in ref.draws.get(c["id"], {}).items():
                name = f"a{len(arrays)}"
                arrays[name] = value
                index[c["id"]][key] = name
        np.savez(work / f"inputs-{ch}.npz", **arrays)
        (work / f"inputs-{ch}.json").write_text(json.dumps(index), encoding="utf-8")
        for name in (f"inputs-{ch}.npz", f"inputs-{ch}.json"):
            os.chmod(work / name, 0o644)
    return paths


def reachable_by_nobody(config: GradingConfig, single: bool = False) -> list[str]:
    """The folders the child must not see that the user nobody can get into (for the ``nobody`` sandbox).

    With ``single`` the submission itself is the student's own and may be reachable.
    """
    needed = needed_paths(child_sys_path())
    own = {str(Path(p).resolve()) for p in config.hide} if single else set()
    out = []
    for path in hidden_paths(config):
        if path in own or any(_contains(path, p) for p in needed):
            continue
        if os.path.exists(path) and nobody_can_reach(path):
            out.append(path)
    return out


def _contains(folder: str, path: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


#: the distribution's packages, which the child may import as the student's check command does (the learner's
#: library, the book's helpers, the case framework less its cases/, the grader's child); nothing in them is secret
CHILD_PACKAGES = ("course_lib", "course_book", "course_exercises", "course_grader")


def hidden_paths(config: GradingConfig) -> list[str]:
    """Paths the student's process must not see: solutions, reports, submissions, the folder of every
    cases file - the package's own registry (:data:`~course_exercises.casefile.CASES_DIR`, which holds
    every ``expected()``) always, in every copy of the package on the child's import paths: the child
    needs the rest of the package and site-packages for its imports -, and the repository's own folders
    and files other than the imported packages (:data:`CHILD_PACKAGES`; exercise_sources/ holds the answers; an archive
    of the course may lie at its top)."""
    hide = [config.solutions_dir, config.out_dir, *config.hide, CASES_DIR]
    for path in child_sys_path():  # every other copy of the package on the child's import paths, too
        copy = Path(path) / CASES_DIR.parent.name / CASES_DIR.name  # (a clone beside a site-packages install)
        if copy.is_dir():
            hide.append(copy)
    if config.reference_manifest is not None:
        hide.append(Path(config.reference_manifest).parent)
    for p in config.cases_files:
        hide.append(Path(p).parent)
    root = config.course_root
    if root is not None and (root / "course_lib").is_dir():
        imported = {CASES_DIR.parent.parent / name for name in CHILD_PACKAGES}
        hide.append(root / CASES_DIR.parent.name / CASES_DIR.name)
        try:
            hide.extend(e for e in root.iterdir() if (e.is_dir() or e.is_file()) and not e.is_symlink()
                        and not (e.name in CHILD_PACKAGES and e.resolve() in imported))  # files too (a zip)
        except OSError:
            pass
    return list(dict.fromkeys(str(Path(p).resolve()) for p in hide))  # (each once, in order)


def _strip_workdir(text: str, work: Path) -> str:
    """Show ``06_feed_forward.ipynb`` instead of the sandbox's path to it."""
    for base in {str(work / "submission"), os.path.realpath(work / "submission")}:
        text = text.replace(base + os.sep, "")
    return text.replace("<extracted from submission/", "<extracted from ").replace("'submission/", "'")


def standin_note(case: dict, cases: list[dict]) -> str:
    """``"ran with the course's causal_mask (exercise 8.2) in place of yours"`` for a manifest entry with
    stand-ins (``""`` without)."""
    names = sorted((case.get("standins") or {}).keys())
    if not names:
        return ""
    exercise_of = {c["function"]: c["exercise"] for c in cases}
    parts = [name + (f" (exercise {exercise_of[name]})" if name in exercise_of else "") for name in names]
    return f"ran with the course's {', '.join(parts)} in place of yours"


def _notebook_notes(ref: Reference, run: ChildRun, work: Path, inspected: dict[str, ChapterInspection]
                    ) -> tuple[dict[str, str], list[str], dict[str, list[str]]]:
    """``(chapter -> why its notebook cannot be read, the grader's notes, chapter -> the child's notes)``: each
    said once, not once per case. The child's words (why a notebook cannot be read, one note per skipped cell)
    are student text: the reports quote them after the grader's lines (:mod:`.quoting`); the grader's own
    note only says that they exist."""
    unreadable, notes, child_notes = {}, [], {}
    for ch in ref.chapters:
        seen = run.notebooks.get(ch)
        if not seen:
            continue
        numbers = inspected[ch].cell_numbers if ch in inspected else {}
        said = []
        if seen["status"] != "ok":
            why = rename_cells_with(_strip_workdir(seen["problem"], work), numbers) or "it cannot be read"
            unreadable[ch] = why
            said.append(why)
            notes.append(f"{ref.notebooks[ch]} cannot be read, so its exercises score 0 (why: see the messages "
                         f"from your code's run, quoted below).")
        skipped = [rename_cells_with(_strip_workdir(note, work), numbers) for note in seen["notes"]]
        if skipped:
            notes.append(f"{ref.notebooks[ch]}: the run of your code reported {len(skipped)} skipped code "
                         f"cell{'s' if len(skipped) > 1 else ''} (only their definitions are lost; its messages are "
                         f"quoted below).")
        if said or skipped:
            child_notes[ch] = said + skipped
    return unreadable, notes, child_notes


def ran_out_of_memory(chapter_status: dict[str, str], child_errors: list[str | None]) -> bool:
    """Whether the report says "Your code ran out of memory": a chapter the parent marked ``memory`` (its
    cgroup's OOM counters, see :func:`.sandbox.run_chapters`), or a case whose recorded exception TYPE is a
    ``MemoryError`` (Python's and numpy's answer at the address-space limit; the child's runner writes the type
    first). torch's CPU allocator raises ``RuntimeError``: only its quoted text says "can't allocate memory".
    Never words in an error's text: ``ValueError: ... out of memory layout order`` is a ValueError."""
    return "memory" in chapter_status.values() or any(raised_memory_error(e) for e in child_errors)


def _judge(sub: Submission, ref: Reference, work: Path, run: ChildRun, flags: list[str],
           notes: list[str], limits: Limits, inspected: dict[str, ChapterInspection]) -> StudentResult:
    verdicts = []
    unreadable, notebook_notes, child_notes = _notebook_notes(ref, run, work, inspected)
    notes.extend(notebook_notes)
    for ch in unreadable:
        if run.chapter_status.get(ch) == "ok":
            run.chapter_status[ch] = "unreadable"
    for c in ref.cases:
        status = run.chapter_status.get(c["chapter"])
        numbers = inspected[c["chapter"]].cell_numbers if c["chapter"] in inspected else {}
        if status == "missing":
            v = judge_case(c, None, ref.arrays[c["id"]])
            v.message = (f"Exercise {c['exercise']} ({c['function']}), case {c['id']}: "
                         f"the notebook {ref.notebooks[c['chapter']]} is not in the submission.")
        elif c["chapter"] in unreadable:
            v = judge_case(c, None, ref.arrays[c["id"]])
            v.message = (f"Exercise {c['exercise']} ({c['function']}), case {c['id']}: not graded - the notebook "
                         f"{ref.notebooks[c['chapter']]} cannot be read (see the notes).")
        else:
            v = judge_case(c, run.results.get(c["id"]), ref.arrays[c["id"]], status)
            # the student's own file names and the "code cell N" numbering of the check command
            v.message = rename_cells_with(_strip_workdir(v.message, work), numbers)
            if v.child_error:
                v.child_error = rename_cells_with(_strip_workdir(v.child_error, work), numbers)
        v.note = standin_note(c, ref.cases)
        if v.note and not v.passed and status not in ("missing",) and c["chapter"] not in unreadable:
            v.message += f"\n  Note: this case {v.note}, so a mistake there costs no points here."
        verdicts.append(v)
    drawn = {c["id"]: bool(c.get("draws")) for c in ref.cases}
    unearned = unearned_passes((v.case_id, v.exercise, v.passed, drawn[v.case_id]) for v in verdicts)
    for v in verdicts:
        if v.case_id in unearned:
            v.points, v.passed = 0, False
            v.held = "rejection" if unearned[v.case_id] == REJECTION_ALONE else "fixed"
            v.message = f"Exercise {v.exercise} ({v.function}), case {v.case_id}: {unearned[v.case_id]}."
    memory = ran_out_of_memory(run.chapter_status, [v.child_error for v in verdicts])
    statuses = set(run.chapter_status.values())
    status = ("timeout" if "timeout" in statuses else "memory" if memory else "crashed" if "crashed" in statuses
              else "unreadable" if "unreadable" in statuses else "missing" if "missing" in statuses else "ok")
    for ch, s in sorted(run.chapter_status.items()):
        if s == "timeout":
            notes.append(f"Chapter {ch}: stopped after the time limit (an endless loop or very slow code?); "
                         f"its unfinished cases score 0.")
        elif s in ("crashed", "memory"):
            notes.append(f"Chapter {ch}: the process stopped unexpectedly (sys.exit, os._exit, a crash or too much "
                         f"memory); the cases it had not finished score 0.")
    if memory:
        notes.append(f"Your code ran out of memory (the limit is {limits.memory_mb} MiB).")
    if run.output_cut:
        notes.append("Your code printed too much: the output was cut at the size limit (this costs no points).")
    if run.killed_strays:
        flags.append(f"left {run.killed_strays} process(es) running after the child ended (killed)")
    for problem in dict.fromkeys(run.problems):
        flags.append(f"the child broke the result protocol: {problem}")
    exercises: dict[str, int] = {}
    for v in verdicts:
        exercises[v.exercise] = exercises.get(v.exercise, 0) + v.points
    exercise_notes: dict[str, list[str]] = {}
    for inspection in inspected.values():  # an exercise function defined in two cells: the later one counts
        for exercise, note in inspection.notes.items():
            exercise_notes.setdefault(exercise, []).append(note)
    return StudentResult(
        student=sub.student, submission_hash=sub.sha256, manifest_hash=ref.sha256, status=status,
        score=sum(v.points for v in verdicts), max_score=int(ref.manifest["max_score"]), exercises=exercises,
        exercises_max=_exercise_maxima(ref), cases=[asdict(v) for v in verdicts], flags=flags, notes=notes,
        chapter_status=dict(run.chapter_status), runtime=run.seconds, stderr_tail=run.stderr_tail[-1500:],
        graded_at=_now(), child_notes=child_notes, exercise_notes=exercise_notes)


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

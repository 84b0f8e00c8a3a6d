"""Find the submissions, hash them, and copy out only their exercise notebooks - safely.

A submission is a folder or a ``.zip`` holding one student's notebooks; the
student id is the folder/zip name. From a submission the grader takes *only*
the files named like the course's notebooks (``04_attention.ipynb`` ...), found
anywhere inside it (the shallowest wins); nothing else - ``conftest.py``,
``torch.py``, ``sitecustomize.py``, tests - is ever copied, so it cannot take
effect.

Zip archives are read member by member, never with ``extractall``: a member
with an absolute path, a ``..`` component, a symbolic link, encryption, or a
size over the caps is skipped and reported (a *flag*); an archive with too
many members, too large in total, or unreadable is an *invalid submission*.
Folders are walked without following symbolic links.

Source: the autograder issue (isolation and trust).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

__all__ = ["IntakeLimits", "Submission", "discover", "collect_notebooks", "student_id"]

_SKIP_DIRS = {".ipynb_checkpoints", "__MACOSX", ".git", "__pycache__"}


@dataclass(frozen=True)
class IntakeLimits:
    """Caps applied when reading a submission.

    Attributes:
        notebook_bytes: largest notebook accepted (bytes).
        total_bytes: largest total (uncompressed) size of a submission.
        members: most files/members in a submission.
        zip_bytes: largest ``.zip`` file accepted (compressed).
    """

    notebook_bytes: int = 20 << 20
    total_bytes: int = 200 << 20
    members: int = 2000
    zip_bytes: int = 100 << 20


@dataclass
class Submission:
    """One student's submission.

    Attributes:
        student: the student id (folder/zip name, made file-name safe).
        path: the folder or ``.zip``.
        sha256: hash of the submission's bytes (zip file, or every file of the folder with its path).
        notebooks: chapter -> notebook bytes (filled by :func:`collect_notebooks`).
        flags: problems found while reading it (for the instructor).
        invalid: why the submission cannot be graded at all (``None`` if it can).
    """

    student: str
    path: Path
    sha256: str = ""
    notebooks: dict[str, bytes] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    invalid: str | None = None


def student_id(path: Path) -> str:
    """The student id of a submission path: its name without ``.zip``, file-name safe."""
    name = path.name[:-4] if path.name.lower().endswith(".zip") and path.is_file() else path.name
    safe = re.sub(r"[^A-Za-z0-9._@+-]", "_", name).strip(".") or "student"
    if safe.startswith(("_", "-")):
        safe = "s" + safe
    return safe[:100]


def discover(paths: list[Path], single: bool = False, student: str | None = None) -> list[Submission]:
    """List the submissions.

    Args:
        paths: folders holding one entry per student (a sub-folder or a
            ``.zip``); or, with ``single``, the submissions themselves.
        single: each path *is* one submission (e.g. Gradescope's
            ``/autograder/submission``).
        student: with ``single`` and one path, the student id to use.

    Returns:
        submissions sorted by student id; duplicate ids get ``~2``, ``~3`` ...

    Raises:
        FileNotFoundError: a path does not exist.
        ValueError: ``student`` given without ``single`` and exactly one path;
            a path (without ``single``) that holds notebooks itself.
    """
    entries: list[Path] = []
    for base in paths:
        base = Path(base)
        if not base.exists():
            raise FileNotFoundError(f"SUBMISSIONS path {str(base)!r} does not exist")
        if single:
            entries.append(base)
            continue
        if not base.is_dir():
            raise FileNotFoundError(f"SUBMISSIONS path {str(base)!r} is not a folder (use --single for one submission)")
        if any(p.suffix == ".ipynb" for p in base.iterdir() if p.is_file()):
            raise ValueError(
                f"SUBMISSIONS path {str(base)!r} holds notebooks itself, so it looks like ONE student's "
                "submission: pass the folder that holds one sub-folder or .zip per student, "
                "or add --single to grade this folder as one submission"
            )
        for entry in sorted(base.iterdir()):
            if entry.name.startswith("."):
                continue
            if entry.is_symlink():
                entries.append(entry)  # graded as invalid: never followed
            elif entry.is_dir() or (entry.is_file() and entry.name.lower().endswith(".zip")):
                entries.append(entry)
    if student is not None and not (single and len(entries) == 1):
        raise ValueError("--student needs --single and exactly one submission path")
    subs: list[Submission] = []
    seen: dict[str, int] = {}
    for entry in entries:
        sid = student if student is not None else student_id(entry)
        sid = re.sub(r"[^A-Za-z0-9._@+~-]", "_", sid) or "student"
        n = seen.get(sid, 0) + 1
        seen[sid] = n
        sub = Submission(f"{sid}~{n}" if n > 1 else sid, entry)
        if n > 1:
            sub.flags.append(f"duplicate student id {sid!r}: graded as {sub.student!r}")
        subs.append(sub)
    return sorted(subs, key=lambda s: s.student)


def _file_sha(path: Path, h) -> None:
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)


def _hash_folder(root: Path, limits: IntakeLimits) -> str:
    h = hashlib.sha256(b"folder\0")
    count = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            count += 1
            if count > limits.members * 2:
                h.update(b"\0truncated")
                return h.hexdigest()
            st = os.lstat(full)
            h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
            if stat.S_ISLNK(st.st_mode):
                h.update(b"link:" + os.fsencode(os.readlink(full)) + b"\0")
            elif stat.S_ISREG(st.st_mode) and st.st_size <= limits.total_bytes:
                _file_sha(Path(full), h)
                h.update(b"\0")
            else:
                h.update(f"size:{st.st_size}\0".encode())
    return h.hexdigest()


def submission_hash(sub: Submission, limits: IntakeLimits) -> str:
    """SHA-256 of the submission: the zip's bytes, or every file of the folder with its relative path."""
    p = sub.path
    if p.is_symlink():
        return hashlib.sha256(b"link:" + os.fsencode(os.readlink(p))).hexdigest()
    if p.is_file():
        if p.stat().st_size > limits.zip_bytes:
            return hashlib.sha256(f"too-big:{p.name}:{p.stat().st_size}".encode()).hexdigest()
        h = hashlib.sha256(b"zip\0")
        _file_sha(p, h)
        return h.hexdigest()
    return _hash_folder(p, limits)


def _chapter_of(name: str, notebooks: dict[str, str]) -> tuple[str | None, bool]:
    """``(chapter, exact)`` for a file name: exact course name, or a unique ``NN_*.ipynb`` variant."""
    for chapter, nb in notebooks.items():
        if name == nb:
            return chapter, True
    m = re.match(r"^(\d\d)[_\- ].*\.ipynb$", name)
    if m and m.group(1) in notebooks:
        return m.group(1), False
    return None, False


def _unsafe_member(name: str) -> str | None:
    if "\x00" in name:
        return "NUL byte in the name"
    norm = name.replace("\\", "/")
    if norm.startswith("/") or re.match(r"^[A-Za-z]:", norm):
        return "absolute path"
    if ".." in PurePosixPath(norm).parts:
        return "'..' in the path"
    return None


def _pick(found: dict[str, list[tuple[int, bool, str, object]]], sub: Submission) -> dict[str, object]:
    """Choose one file per chapter: exact name first, then the shallowest, then by name."""
    chosen = {}
    for chapter, items in sorted(found.items()):
        items.sort(key=lambda t: (not t[1], t[0], t[2]))
        depth, exact, name, handle = items[0]
        if len(items) > 1:
            sub.flags.append(f"several notebooks for chapter {chapter}: graded {name!r}, ignored "
                             + ", ".join(repr(i[2]) for i in items[1:4]))
        if not exact:
            sub.flags.append(f"notebook of chapter {chapter} has a non-standard name: {name!r}")
        chosen[chapter] = handle
    return chosen


def _collect_zip(sub: Submission, notebooks: dict[str, str], limits: IntakeLimits) -> None:
    p = sub.path
    if p.stat().st_size > limits.zip_bytes:
        sub.invalid = f"the zip file is larger than {limits.zip_bytes >> 20} MiB"
        return
    try:
        zf = zipfile.ZipFile(p)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        sub.invalid = f"not a readable zip archive ({exc})"
        return
    with zf:
        infos = zf.infolist()
        if len(infos) > limits.members:
            sub.invalid = f"the zip has {len(infos)} members (at most {limits.members} allowed)"
            return
        declared = sum(max(0, i.file_size) for i in infos)
        if declared > limits.total_bytes:
            sub.flags.append(f"zip bomb: members declare {declared} bytes uncompressed "
                             f"(limit {limits.total_bytes}); oversized members skipped")
        found: dict[str, list] = {}
        for info in infos:
            name = info.filename
            why = _unsafe_member(name)
            mode = (info.external_attr >> 16) & 0o170000
            if why:
                sub.flags.append(f"unsafe zip member {name!r} skipped ({why})")
                continue
            if mode == stat.S_IFLNK:
                sub.flags.append(f"symbolic link in zip {name!r} skipped")
                continue
            if info.is_dir():
                continue
            parts = PurePosixPath(name.replace("\\", "/")).parts
            if any(part in _SKIP_DIRS for part in parts[:-1]) or not parts:
                continue
            chapter, exact = _chapter_of(parts[-1], notebooks)
            if chapter is None:
                continue
            if info.flag_bits & 0x1:
                sub.flags.append(f"encrypted zip member {name!r} skipped")
                continue
            if info.file_size > limits.notebook_bytes:
                sub.flags.append(f"zip member {name!r} skipped: {info.file_size} bytes uncompressed "
                                 f"(limit {limits.notebook_bytes})")
                continue
            found.setdefault(chapter, []).append((len(parts), exact, name, info))
        for chapter, info in _pick(found, sub).items():
            try:
                with zf.open(info) as fh:
                    data = fh.read(limits.notebook_bytes + 1)
            except (zipfile.BadZipFile, OSError, RuntimeError, NotImplementedError, EOFError, ValueError) as exc:
                sub.flags.append(f"zip member {info.filename!r} unreadable ({type(exc).__name__}: {exc})")
                continue
            if len(data) > limits.notebook_bytes:
                sub.flags.append(f"zip member {info.filename!r} skipped: larger than {limits.notebook_bytes} bytes")
                continue
            sub.notebooks[chapter] = data


def _collect_folder(sub: Submission, notebooks: dict[str, str], limits: IntakeLimits) -> None:
    root = sub.path
    found: dict[str, list] = {}
    count = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = os.path.relpath(dirpath, root)
        depth = 0 if rel_dir == "." else len(Path(rel_dir).parts)
        keep = []
        for d in sorted(dirnames):
            full = os.path.join(dirpath, d)
            if os.path.islink(full):
                sub.flags.append(f"symbolic link {os.path.relpath(full, root)!r} ignored")
            elif d not in _SKIP_DIRS and not d.startswith("."):
                keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            count += 1
            if count > limits.members:
                sub.invalid = f"the folder has more than {limits.members} files"
                return
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            chapter, exact = _chapter_of(name, notebooks)
            if stat.S_ISLNK(st.st_mode):
                sub.flags.append(f"symbolic link {os.path.relpath(full, root)!r} ignored")
                continue
            if chapter is None or not stat.S_ISREG(st.st_mode):
                continue
            if st.st_size > limits.notebook_bytes:
                sub.flags.append(f"{os.path.relpath(full, root)!r} skipped: {st.st_size} bytes "
                                 f"(limit {limits.notebook_bytes})")
                continue
            found.setdefault(chapter, []).append((depth, exact, os.path.relpath(full, root), full))
    for chapter, full in _pick(found, sub).items():
        try:
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
        except OSError as exc:
            sub.flags.append(f"{full!r} unreadable ({exc.strerror})")
            continue
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(limits.notebook_bytes + 1)
        if len(data) > limits.notebook_bytes:
            sub.flags.append(f"{full!r} skipped: larger than {limits.notebook_bytes} bytes")
            continue
        sub.notebooks[chapter] = data


def collect_notebooks(sub: Submission, notebooks: dict[str, str], chapters: list[str],
                      limits: IntakeLimits | None = None) -> Submission:
    """Hash the submission and read its exercise notebooks into ``sub.notebooks`` (chapter -> bytes).

    Args:
        sub: from :func:`discover`.
        notebooks: chapter -> course notebook file name.
        chapters: the chapters being graded (others are not read).
        limits: the caps (default :class:`IntakeLimits`).

    Returns:
        ``sub``, with ``sha256``, ``notebooks``, ``flags`` and ``invalid`` set.
        A submission with none of the graded notebooks is invalid.
    """
    limits = limits or IntakeLimits()
    wanted = {ch: notebooks[ch] for ch in chapters if ch in notebooks}
    try:
        if not sub.sha256:
            sub.sha256 = submission_hash(sub, limits)
    except OSError as exc:
        sub.sha256 = hashlib.sha256(f"unreadable:{sub.path}".encode()).hexdigest()
        sub.invalid = f"the submission cannot be read ({exc.strerror or exc})"
        return sub
    p = sub.path
    try:
        if p.is_symlink():
            sub.invalid = "the submission is a symbolic link (not followed)"
        elif p.is_file():
            _collect_zip(sub, wanted, limits)
        elif p.is_dir():
            _collect_folder(sub, wanted, limits)
        else:
            sub.invalid = "the submission is neither a folder nor a .zip file"
    except OSError as exc:
        sub.invalid = f"the submission cannot be read ({exc.strerror or exc})"
    if sub.invalid is None and not sub.notebooks:
        sub.invalid = ("no exercise notebook found (expected files named like "
                       + ", ".join(sorted(wanted.values())[:3]) + " ...)")
    return sub

"""Find the submissions, hash them, and copy out only their exercise notebooks - safely.

A submission is a folder or a ``.zip`` holding one student's notebooks; the
student id is made from the folder/zip name (file-name safe, unique, never a
report's name; see :func:`discover`), and ``Submission.source`` keeps the name.
Any other entry of a SUBMISSIONS folder (another archive, a single file, a
name starting with a dot) is an *invalid submission* saying what to submit
instead; only operating-system litter such as ``.DS_Store`` is skipped.

From a submission the grader takes *only* the files named like the course's
notebooks (``04_attention.ipynb`` ...), found anywhere inside it (the
shallowest wins); nothing else - ``conftest.py``, ``torch.py``,
``sitecustomize.py``, tests - is ever copied, so it cannot take effect.

Zip archives are read member by member, never with ``extractall``: a member
with an absolute path, a ``..`` component, a symbolic link, encryption, or a
size over the caps is skipped and reported (a *flag*); an archive with too
many members, too large in total, or unreadable is an *invalid submission*.
Folders are walked without following symbolic links.

Design and threat model: ``course_grader/SECURITY.md``.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import sys
import unicodedata
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable

__all__ = ["IntakeLimits", "Submission", "discover", "collect_notebooks", "student_id", "display_name",
           "RESERVED_IDS", "submission_hash"]

_SKIP_DIRS = {".ipynb_checkpoints", "__MACOSX", ".git", "__pycache__"}

#: Names the grader itself writes into ``--out`` (``report``/``cli``: grades.csv, summary.json;
#: ``grader.build_reference``: _reference; ``cli``: _history, the earlier manifests): no student id may take
#: them (compared case-insensitively).
RESERVED_IDS = frozenset({"grades.csv", "summary.json", "_reference", "_history"})

#: Operating-system litter at the top level of a SUBMISSIONS folder, never a student's work:
#: skipped (with a note on stderr). Files and folders are told apart so that a folder named
#: ``Thumbs.db`` still gets its row.
_LITTER_FILES = frozenset({".ds_store", "thumbs.db", "ehthumbs.db", "desktop.ini", ".directory"})
_LITTER_DIRS = frozenset({"__macosx", ".spotlight-v100", ".trashes", ".fseventsd", ".temporaryitems",
                          "$recycle.bin", "system volume information", ".ipynb_checkpoints"})

#: Archive formats the grader does not open (only ``.zip`` is read), longest suffix first.
_OTHER_ARCHIVES = (".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst", ".tgz", ".tbz2", ".txz", ".tar", ".rar",
                   ".7z", ".gz", ".bz2", ".xz", ".zst", ".lzma", ".z")

#: Windows device names: not usable as a file name (with any extension) on Windows.
_WINDOWS_DEVICES = frozenset({"con", "prn", "aux", "nul", *(f"com{c}" for c in "0123456789\u00b9\u00b2\u00b3"),
                              *(f"lpt{c}" for c in "0123456789\u00b9\u00b2\u00b3")})

_ID_BYTES = 100  # longest id (UTF-8 bytes) before a collision suffix
_ID_PUNCT = "._@+-"  # ASCII punctuation kept in ids (``~`` is reserved for the collision suffix)
_WHAT_TO_SUBMIT = "submit a folder or a .zip of the notebooks instead"


@dataclass(frozen=True)
class IntakeLimits:
    """Caps applied when reading a submission.

    Attributes:
        notebook_bytes: largest notebook accepted (bytes).
        total_bytes: largest total (uncompressed) size of a submission.
        members: most files/members in a submission.
        zip_bytes: largest ``.zip`` file accepted (compressed).
    """

    notebook_bytes: int = 24 << 20  # as the loader (extract.MAX_NOTEBOOK_BYTES): outputs count
    total_bytes: int = 200 << 20
    members: int = 2000
    zip_bytes: int = 100 << 20


@dataclass
class Submission:
    """One student's submission.

    Attributes:
        student: the student id (folder/zip name, made file-name safe and unique; see :func:`discover`).
        path: the folder or ``.zip``.
        sha256: hash of the submission's bytes (zip file, or every file of the folder with its path).
        notebooks: chapter -> notebook bytes (filled by :func:`collect_notebooks`).
        flags: problems found while reading it (for the instructor).
        invalid: why the submission cannot be graded at all (``None`` if it can).
        source: what the id was made from, for the reports: the folder/file name as found (several
            SUBMISSIONS paths: the path), readable text (see :func:`display_name`).
    """

    student: str
    path: Path
    sha256: str = ""
    notebooks: dict[str, bytes] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    invalid: str | None = None
    source: str = ""


def display_name(name: str) -> str:
    """``name`` as text that can be written anywhere: bytes that were not UTF-8 shown as ``\\xNN``."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _id_char(ch: str) -> str:
    """``ch`` if it may stand in an id (a letter, mark or digit of any script, or ``._@+-``), else ``_``."""
    return ch if unicodedata.category(ch)[0] in "LMN" or ch in _ID_PUNCT else "_"


def _cut_bytes(text: str, limit: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 encoding has at most ``limit`` bytes."""
    raw = text.encode("utf-8")
    return text if len(raw) <= limit else raw[:limit].decode("utf-8", "ignore")


def _safe_id(text: str) -> str:
    """A file-name and CSV safe id made from ``text`` (see :func:`student_id`)."""
    text = unicodedata.normalize("NFC", display_name(text))
    safe = "".join(_id_char(ch) for ch in text).lstrip(".")
    safe = _cut_bytes(safe, _ID_BYTES).rstrip(".") or "student"
    if not safe[0].isalnum():  # no leading _ - + @ or mark: no hidden name, option or spreadsheet formula
        safe = ("s_" if unicodedata.category(safe[0])[0] == "M" else "s") + safe
    if safe.split(".")[0].casefold() in _WINDOWS_DEVICES:
        safe = "s_" + safe
    return _cut_bytes(safe, _ID_BYTES)


def student_id(path: Path) -> str:
    """The student id of a submission path, before collisions are resolved (see :func:`discover`).

    The name without ``.zip``, NFC-normalised; letters, marks and digits of any
    script and ``. _ @ + -`` are kept, anything else (path separators, control
    characters, spaces, ``~`` ...) becomes ``_``; no leading dot, it starts with
    a letter or digit, it is not a Windows device name, and it has at most 100
    UTF-8 bytes.
    """
    name = path.name[:-4] if path.name.lower().endswith(".zip") and path.is_file() else path.name
    return _safe_id(name)


def _archive_suffix(name: str) -> str | None:
    """The suffix of an archive format the grader does not open (``.tar.gz``, ``.rar`` ...), else ``None``."""
    lower = name.lower()
    return next((s for s in _OTHER_ARCHIVES if lower.endswith(s) and len(lower) > len(s)), None)


def _form_problem(entry: Path, in_folder: bool) -> str | None:
    """Why ``entry`` cannot be a submission (its name or form), or ``None`` if it may be one.

    ``in_folder``: ``entry`` was found in a SUBMISSIONS folder (its name comes from
    the student), rather than given by the instructor with ``--single``.
    """
    shown = repr(display_name(entry.name))
    if entry.is_symlink():
        return f"{shown} is a symbolic link, which the grader does not follow; {_WHAT_TO_SUBMIT}"
    if in_folder and entry.name.startswith("."):
        return (f"the name {shown} starts with a dot (a hidden file or folder); "
                f"submit a folder or a .zip of the notebooks whose name does not start with a dot")
    if entry.is_dir():
        return None
    if not entry.is_file():
        return f"{shown} is neither a folder nor a regular file; {_WHAT_TO_SUBMIT}"
    if entry.name.lower().endswith(".zip"):
        return None
    suffix = _archive_suffix(entry.name)
    if suffix:
        return f"{shown} is a {suffix} archive, which the grader does not open; {_WHAT_TO_SUBMIT}"
    return f"{shown} is a single file, not a folder or a .zip; {_WHAT_TO_SUBMIT}"


def _is_litter(entry: Path, names: set[str]) -> bool:
    """``entry`` (at the top level of a SUBMISSIONS folder holding ``names``) is operating-system litter.

    ``.DS_Store``, ``Thumbs.db``, ``__MACOSX`` and the like (by name and kind), and a
    macOS ``._X`` resource file next to an ``X``.
    """
    if entry.is_symlink():
        return False
    key = entry.name.casefold()
    if entry.is_file():
        return key in _LITTER_FILES or (entry.name.startswith("._") and entry.name[2:] in names)
    return entry.is_dir() and key in _LITTER_DIRS


def _stderr(msg: str) -> None:
    """Print one note to stderr (the default ``log`` of :func:`discover`)."""
    print(msg, file=sys.stderr)


def _folder_entries(base: Path, log: Callable[[str], None]) -> list[Path]:
    """Every entry of a SUBMISSIONS folder but its operating-system litter (each skip is logged)."""
    if not base.is_dir():
        raise FileNotFoundError(f"SUBMISSIONS path {str(base)!r} is not a folder (use --single for one submission)")
    entries = sorted(base.iterdir())
    notebooks = [p.name for p in entries if p.suffix == ".ipynb" and p.is_file() and not p.is_symlink()]
    if notebooks:
        raise ValueError(
            f"SUBMISSIONS path {str(base)!r} holds notebooks itself ({display_name(notebooks[0])!r} ...), so it "
            "looks like ONE student's submission: pass the folder that holds one sub-folder or .zip per student, "
            "or add --single to grade this folder as one submission"
        )
    names = {p.name for p in entries}
    kept = []
    for entry in entries:
        if _is_litter(entry, names):
            log(f"course-grade: note: skipped {display_name(str(entry))!r} (operating-system litter, not a submission)")
        else:
            kept.append(entry)
    return kept


def discover(paths: list[Path], single: bool = False, student: str | None = None,
             log: Callable[[str], None] = _stderr) -> list[Submission]:
    """List the submissions: every entry gets one, graded or marked invalid.

    Args:
        paths: folders holding one entry per student (a sub-folder or a
            ``.zip``); or, with ``single``, the submissions themselves.
        single: each path *is* one submission (e.g. Gradescope's
            ``/autograder/submission``).
        student: with ``single`` and one path, the student id to use.
        log: where the notes about skipped operating-system litter go (default: stderr).

    Returns:
        submissions sorted by student id. An entry that is not a folder or a
        ``.zip`` (another archive, a single file, a name starting with a dot, a
        symbolic link) is a submission with ``invalid`` set; only litter such as
        ``.DS_Store`` or ``__MACOSX`` is skipped. Ids are unique, also
        case-insensitively, and never a name the grader writes into ``--out``
        (see :data:`RESERVED_IDS` and :func:`_assign_ids`).

    Raises:
        FileNotFoundError: a path does not exist.
        ValueError: ``student`` given without ``single`` and exactly one path;
            a path (without ``single``) that holds notebooks itself.
    """
    bases = list(dict.fromkeys(Path(p) for p in paths))  # a path given twice is read once
    entries: list[Path] = []
    for base in bases:
        if not base.exists() and not base.is_symlink():
            raise FileNotFoundError(f"SUBMISSIONS path {str(base)!r} does not exist")
        entries.extend([base] if single else _folder_entries(base, log))
    if student is not None and not (single and len(entries) == 1):
        raise ValueError("--student needs --single and exactly one submission path")
    subs = []
    for entry in entries:
        sid = _safe_id(student) if student is not None else student_id(entry)
        source = display_name(entry.name if len(bases) == 1 else str(entry))
        subs.append(Submission(sid, entry, invalid=_form_problem(entry, in_folder=not single), source=source))
    _assign_ids(subs, whole_paths=len(bases) > 1)
    return sorted(subs, key=lambda s: s.student)


def _keeps_plain_id(sub: Submission) -> bool:
    """The submission's own name *is* its id (folder ``alice``, not ``alice.zip`` or ``Alice (1)``)."""
    return unicodedata.normalize("NFC", display_name(sub.path.name)) == sub.student


def _suffixed(subs: list[Submission], whole_paths: bool, digits: int) -> list[str]:
    """``id~HASH`` for each submission: the first ``digits`` hex digits of the SHA-256 of its name (or path)."""
    keys = [os.fsencode(str(s.path) if whole_paths else s.path.name) for s in subs]
    return [f"{s.student}~{hashlib.sha256(k).hexdigest()[:digits]}" for s, k in zip(subs, keys)]


def _assign_ids(subs: list[Submission], whole_paths: bool) -> None:
    """Make the ids unique (also case-insensitively) and keep them off :data:`RESERVED_IDS`.

    A submission keeps its id when no other has the same one, or when it is
    the only one of those whose name *is* the id (folder ``alice`` against
    ``alice.zip``); every other one gets ``~`` and the first hex digits of the
    SHA-256 of its original name (of its path, with ``whole_paths``): the same
    names always give the same ids, whatever else is in the folder and in
    whatever order it is read. Plain ids never hold a ``~``, so a suffixed id
    cannot meet one. Each renamed submission gets a flag for the instructor.
    """
    groups: dict[str, list[Submission]] = {}
    for sub in subs:
        groups.setdefault(sub.student.casefold(), []).append(sub)
    renamed: list[Submission] = []
    for folded, group in groups.items():
        if folded in RESERVED_IDS:
            renamed += group
            continue
        owners = [s for s in group if _keeps_plain_id(s)]
        keep = group[0] if len(group) == 1 else owners[0] if len(owners) == 1 else None
        renamed += [s for s in group if s is not keep]
    for digits in (8, 16, 64):  # longer suffixes only if short ones happen to meet
        ids = _suffixed(renamed, whole_paths, digits)
        if len({i.casefold() for i in ids}) == len(ids):
            break
    for sub, new in zip(renamed, ids):
        why = ("is reserved for the grader's reports" if sub.student.casefold() in RESERVED_IDS
               else "is shared with another submission (duplicate student id)")
        sub.flags.append(f"the id {sub.student!r} of {sub.source!r} {why}: graded as {new!r}")
        sub.student = new


def _file_sha(path: Path, h) -> None:
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)


#: deepest folder level of a submission that is read
MAX_DEPTH = 32


class _FolderTooBig(Exception):
    """A submission folder nested too deep or holding too many entries."""


def _walk(root: Path, max_entries: int):
    """``os.walk(root)`` top-down without recursion (Python 3.11's recurses), never following links.

    Yields ``(dirpath, dirnames, filenames)``; the caller may prune
    ``dirnames`` in place. Raises :class:`_FolderTooBig` past
    :data:`MAX_DEPTH` levels or ``max_entries`` entries (folders included).
    """
    stack, seen = [(str(root), 0)], 0
    while stack:
        top, depth = stack.pop()
        try:
            with os.scandir(top) as it:
                entries = list(it)
        except OSError:
            continue
        seen += len(entries)
        if seen > max_entries:
            raise _FolderTooBig(f"the folder has more than {max_entries} files and folders")
        dirs = sorted(e.name for e in entries if e.is_dir())
        files = sorted(e.name for e in entries if not e.is_dir())
        yield top, dirs, files
        below = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
        if below and depth >= MAX_DEPTH:
            raise _FolderTooBig(f"the folder is nested more than {MAX_DEPTH} levels deep")
        stack.extend((os.path.join(top, d), depth + 1) for d in reversed(below))


def _hash_folder(root: Path, limits: IntakeLimits) -> str:
    h = hashlib.sha256(b"folder\0")
    count = 0
    try:
        walked = list(_walk(root, limits.members * 4))
    except _FolderTooBig:
        return h.hexdigest() + "-too-big"
    for dirpath, dirnames, filenames in walked:
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
    try:
        _collect_walk(sub, root, notebooks, limits, found)
    except _FolderTooBig as exc:
        sub.invalid = str(exc)
        return
    _collect_found(sub, found, limits)


def _collect_walk(sub: Submission, root: Path, notebooks: dict[str, str], limits: IntakeLimits, found: dict) -> None:
    count = 0
    for dirpath, dirnames, filenames in _walk(root, limits.members * 4):
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


def _collect_found(sub: Submission, found: dict, limits: IntakeLimits) -> None:
    """Read the chosen notebook of each chapter (no links followed, size-capped)."""
    if sub.invalid:
        return
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
        sub.invalid = sub.invalid or f"the submission cannot be read ({exc.strerror or exc})"
        return sub
    if sub.invalid:  # already known from its name or form (see discover): nothing is read
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

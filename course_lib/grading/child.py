"""The grader's child: runs one submission's exercise cases and records numbers.

This file is run by the grader as a *script*, never imported by the parent::

    python -I -S -B .../course_lib/grading/child.py SPEC.json

``-I`` (isolated: no current directory or script directory on ``sys.path``, no
``PYTHON*`` variables, no user site), ``-S`` (no ``site``: no ``.pth`` file of
any directory runs) and ``-B`` (no ``.pyc`` written). The only import paths are
the ones the parent lists in the spec (the directory holding ``course_lib`` and
the environment's ``site-packages``), so a student's ``torch.py``,
``numpy.py``, ``sitecustomize.py`` or ``conftest.py`` can never shadow a real
module - and the parent copies only notebooks into the child's folder anyway.

What the child does, in order (see :mod:`course_lib.grading.sandbox` for the
process around it):

1. reads the spec (a JSON object written by the parent);
2. when it runs as root inside fresh namespaces: mounts an empty read-only
   ``tmpfs`` over every path in ``spec["hide"]`` (the solutions, the output
   folder, the other submissions ...);
3. sets its resource limits, soft = hard: address space, CPU seconds, file
   size, open files, processes (only when it runs under its own user id), no
   core dumps;
4. drops its privileges: as root, to ``spec["uid"]``/``spec["gid"]`` (nobody);
   as the unprivileged root of a user namespace, every capability; then sets
   ``no_new_privs``;
5. puts ``sys.stdout``/``sys.stderr`` behind a size cap (a flood is cut and a
   note written) - the file descriptors themselves are files opened by the
   parent and bounded by ``RLIMIT_FSIZE``;
6. loads the cases modules (the course's ``cases.py`` as
   ``course_exercise_cases``, then any extra ones), and for each chapter:
   writes ``progress/NN.started``, loads the student's notebook with
   :func:`course_lib.grading.extract.load_namespace`, calls every case's
   ``produce(ns)`` (and, in the reference run, ``expected()``), and writes each
   returned array to ``results/<case id>/<key>.npy`` with
   ``np.save(..., allow_pickle=False)`` (a case's folder is renamed into place
   when it is complete), plus ``results/<case id>.json`` with the error text if
   the case raised; then ``progress/NN.done``;
7. leaves with ``os._exit(0)`` (no student ``atexit`` hook runs).

Nothing this process writes is trusted by the parent: it only reads arrays
back, with pickling disabled, and checks them against its reference. The
error texts are shown to the student as feedback, nothing more.

Source: the autograder issue ("sandboxed batch grading with reports that cannot
be forged") and ``GRADER-NOTES.md``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import sys
import time

# ---------------------------------------------------------------------------
# Privileged set-up (runs before any course or student code is imported)
# ---------------------------------------------------------------------------
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP, _PR_SET_DUMPABLE = 38, 24, 4


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


_MS_BIND, _MS_REC, _MNT_DETACH = 4096, 16384, 2


def _mount(libc, source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    rc = libc.mount(os.fsencode(source), os.fsencode(target), fstype.encode() if fstype else None, flags,
                    data.encode() if data else None)
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} -> {target}: {os.strerror(err)}")


def _expose(paths: list[str], uid: int, stage_root: str) -> None:
    """Make each path reachable by ``uid`` inside this (private) mount namespace.

    An ancestor that ``uid`` cannot traverse (e.g. ``/root``, mode 0700, when
    Python lives in ``/root/.pyenv``) is covered with an empty tmpfs of mode
    0711 into which only the needed child directory is bind-mounted back: the
    rest of that directory stays invisible to the child.
    """
    libc = _libc()
    for n, target in enumerate(paths):
        target = os.path.realpath(target)
        parts = target.split("/")
        i = 1
        while i < len(parts) - 1:
            ancestor = "/".join(parts[: i + 1])
            st = os.stat(ancestor)
            if not (st.st_mode & 0o001) and st.st_uid != uid:
                below = "/".join(parts[: i + 2])
                import tempfile

                stage = tempfile.mkdtemp(prefix=f"stage-{n}-{i}-", dir=stage_root)
                _mount(libc, below, stage, None, _MS_BIND | _MS_REC, None)
                _mount(libc, "none", ancestor, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=64k,mode=0711")
                os.mkdir(below, 0o755)
                _mount(libc, stage, below, None, _MS_BIND | _MS_REC, None)
                libc.umount2(os.fsencode(stage), _MNT_DETACH)
            i += 1


def _hide(paths: list[str]) -> list[str]:
    """Mount an empty read-only tmpfs over each path; return the ones that failed."""
    libc = _libc()
    failed = []
    for path in paths:
        if not os.path.isdir(path):
            continue
        rc = libc.mount(b"none", os.fsencode(path), b"tmpfs",
                        _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, b"size=4k,mode=000")
        if rc != 0:
            failed.append(f"{path}: {os.strerror(ctypes.get_errno())}")
    return failed


def _set_limits(limits: dict) -> None:
    import resource

    pairs = [
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_AS, limits.get("as_bytes")),
        (resource.RLIMIT_CPU, limits.get("cpu_s")),
        (resource.RLIMIT_FSIZE, limits.get("fsize_bytes")),
        (resource.RLIMIT_NOFILE, limits.get("nofile")),
    ]
    if limits.get("nproc") is not None:
        pairs.append((resource.RLIMIT_NPROC, limits["nproc"]))
    for which, value in pairs:
        if value is None:
            continue
        soft, hard = resource.getrlimit(which)
        value = int(value)
        if hard != resource.RLIM_INFINITY and value > hard:
            value = hard
        if which == resource.RLIMIT_CPU:  # SIGXCPU at the soft limit, SIGKILL one second later
            resource.setrlimit(which, (value, value + 1))
        else:
            resource.setrlimit(which, (value, value))


def _drop_capabilities() -> None:
    """Empty the bounding set and the permitted/effective/inheritable sets."""
    libc = _libc()
    for cap in range(64):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # EINVAL past the last capability

    class _Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class _Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header, data = _Header(0x20080522, 0), (_Data * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def _drop_privileges(spec: dict) -> None:
    drop = spec.get("drop")
    if drop == "uid":
        os.setgroups([])
        os.setgid(int(spec["gid"]))
        os.setuid(int(spec["uid"]))
        if os.getuid() == 0 or os.geteuid() == 0:  # pragma: no cover - defensive
            raise RuntimeError("could not drop root")
    elif drop == "caps":
        _drop_capabilities()
    if sys.platform.startswith("linux"):
        _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


class _CappedStream:
    """A text stream that writes at most ``cap`` characters, then one note."""

    def __init__(self, fd: int, cap: int) -> None:
        self._stream = open(fd, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1)
        self._left = cap
        self._cut = False
        self.encoding = "utf-8"
        self.errors = "backslashreplace"

    def write(self, text) -> int:
        text = str(text)
        n = len(text)
        try:
            if self._left > 0:
                part = text[: self._left]
                self._left -= len(part)
                self._stream.write(part)
            elif not self._cut:
                self._cut = True
                self._stream.write("\n[course grader: output cut here - the size limit was reached]\n")
        except (OSError, ValueError):
            pass
        return n

    def flush(self) -> None:
        try:
            self._stream.flush()
        except (OSError, ValueError):
            pass

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def closed(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False


# ---------------------------------------------------------------------------
# Recording results
# ---------------------------------------------------------------------------
def _write_file(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _touch(directory: str, name: str) -> None:
    try:
        _write_file(os.path.join(directory, name), b"")
    except OSError:
        pass


def _describe(exc: BaseException, limit: int = 2000) -> str:
    """The exception line plus the student's frames (``<extracted from ...>``)."""
    import traceback

    import linecache

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("<extracted from")]
    where = ""
    if frames:
        last = frames[-1]
        cell = ""
        lines = linecache.getlines(last.filename)
        for i in range(min(last.lineno or 0, len(lines)) - 1, -1, -1):
            if lines[i].startswith("# --- cell ") and lines[i].rstrip().endswith(" ---"):
                cell = f" in cell {lines[i].split()[3]}"
                break
        where = f"\n  at {last.name}(){cell}: {(last.line or '').strip()}"
    try:
        text = f"{type(exc).__name__}: {exc}"
    except BaseException:  # a student exception whose __str__ raises
        text = type(exc).__name__
    return (text[:limit] + where)[: limit + 400]


def _save_case(results_dir: str, case_id: str, arrays: dict | None, error: str | None, seconds: float,
               np) -> None:
    """Write ``results/<case_id>/<key>.npy`` (renamed into place) and ``results/<case_id>.json``."""
    tmp = os.path.join(results_dir, f".partial-{case_id}")
    os.mkdir(tmp, 0o755)
    saved = []
    if arrays is not None:
        for key, value in arrays.items():
            with open(os.path.join(tmp, f"{key}.npy"), "wb") as fh:
                np.save(fh, value, allow_pickle=False)
            saved.append(key)
    os.rename(tmp, os.path.join(results_dir, case_id))
    info = json.dumps({"error": error, "seconds": round(seconds, 4), "keys": saved}).encode()
    _write_file(os.path.join(results_dir, f"{case_id}.json"), info)


def _as_plain_arrays(produced, np) -> dict:
    """Check that ``produce`` returned ``{str: numpy array of float64/int64/bool}``; copy to plain arrays."""
    if not isinstance(produced, dict):
        raise TypeError(f"the case produced {type(produced).__name__}, not a dict of arrays")
    out = {}
    for key, value in produced.items():
        if (not isinstance(key, str) or not key or len(key) > 100 or key[0] == "."
                or not key.replace("_", "").replace("-", "").replace(".", "").isalnum() or not key.isascii()):
            raise TypeError(f"bad result key {key!r}")
        if type(value) in (bool, int, float) or isinstance(value, np.generic):
            value = np.asarray(value)
        if type(value) is not np.ndarray:
            raise TypeError(f"`{key}` is a {type(value).__name__}, not a plain numpy array")
        if value.dtype.kind not in "biuf":
            raise TypeError(f"`{key}` has dtype {value.dtype}; expected float, integer or bool")
        kind = value.dtype.kind
        dtype = np.bool_ if kind == "b" else (np.int64 if kind in "iu" else np.float64)
        out[key] = np.array(value, dtype=dtype, copy=True, order="C")
    return out


def _load_module(name: str, path: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _run(spec: dict) -> None:
    import random

    import numpy as np
    import torch

    torch.set_num_threads(1)
    from course_lib.grading.extract import SubmissionError, load_namespace

    try:  # imported here, before "ready", so that it does not count against the first chapter's time
        from IPython.core.inputtransformer2 import TransformerManager  # noqa: F401
    except ImportError:
        pass

    results_dir, progress_dir = spec["results_dir"], spec["progress_dir"]
    notebooks: dict[str, str] = {}
    cases = []
    for i, path in enumerate(spec["cases_files"]):
        module = _load_module("course_exercise_cases" if i == 0 else f"course_extra_cases_{i}", path)
        notebooks.update(getattr(module, "NOTEBOOKS", {}))
        cases.extend(getattr(module, "CASES"))
    wanted = set(spec["case_ids"]) if spec.get("case_ids") is not None else None
    want_expected = bool(spec.get("expected"))
    expected_dir = spec.get("expected_dir")
    if spec.get("meta_path"):  # the reference run describes the cases for the parent
        meta = {
            "notebooks": notebooks,
            "versions": {"torch": torch.__version__, "numpy": np.__version__, "python": sys.version},
            "cases": [
                {"id": c.id, "chapter": c.chapter, "exercise": c.exercise,
                 "function": getattr(c, "function", None) or (c.requires[0] if c.requires else c.exercise),
                 "points": c.points, "requires": list(c.requires), "rtol": c.rtol, "atol": c.atol, "hint": c.hint}
                for c in cases if c.chapter in spec["chapters"]
            ],
        }
        _write_file(spec["meta_path"], json.dumps(meta).encode())
    _touch(progress_dir, "ready")

    for chapter in spec["chapters"]:
        chapter_cases = [c for c in cases if c.chapter == chapter and (wanted is None or c.id in wanted)]
        _touch(progress_dir, f"{chapter}.started")
        ns, load_error = None, None
        name = notebooks.get(chapter)
        path = os.path.join(spec["notebooks_dir"], name) if name else None
        if path is None or not os.path.isfile(path):
            load_error = f"the notebook {name or 'of chapter ' + chapter} is not in the submission"
        else:
            try:
                ns = load_namespace(path)
            except SubmissionError as exc:
                load_error = str(exc)
            except BaseException as exc:  # SystemExit, KeyboardInterrupt ... at import time
                load_error = f"loading the notebook raised {_describe(exc)}"
        for case in chapter_cases:
            for seed_fn in (torch.manual_seed, np.random.seed, random.seed):
                seed_fn(0)
            start = time.perf_counter()
            arrays, error = None, load_error
            if ns is not None:
                missing = [r for r in case.requires if not hasattr(ns, r)]
                if missing:
                    error = f"the notebook does not define {', '.join(missing)}"
                else:
                    try:
                        arrays = _as_plain_arrays(case.produce(ns), np)
                    except BaseException as exc:  # noqa: BLE001 - every failure is the student's
                        arrays, error = None, _describe(exc)
            _save_case(results_dir, case.id, arrays, error, time.perf_counter() - start, np)
            if want_expected and expected_dir:
                exp_arrays, exp_error = None, None
                try:
                    exp_arrays = _as_plain_arrays(case.expected(), np)
                except BaseException as exc:  # noqa: BLE001
                    exp_error = _describe(exc)
                _save_case(expected_dir, case.id, exp_arrays, exp_error, 0.0, np)
        _touch(progress_dir, f"{chapter}.done")
    _touch(progress_dir, "all.done")


def _probe(spec: dict) -> None:
    """Check that the sandboxed child can import what grading needs; write ``probe.json``."""
    import importlib.util

    sys.path[:0] = list(spec["sys_path"])
    import numpy  # noqa: F401

    import course_lib.grading.extract  # noqa: F401

    torch_spec = importlib.util.find_spec("torch")
    if torch_spec is None or torch_spec.origin is None:
        raise ImportError("torch not found")
    with open(torch_spec.origin, "rb") as fh:
        fh.read(1)
    info = {"uid": os.getuid(), "euid": os.geteuid(), "pid": os.getpid()}
    _write_file(os.path.join(spec["results_dir"], "probe.json"), json.dumps(info).encode())


def main(argv: list[str]) -> None:
    """Entry point of the child process; never returns (``os._exit``)."""
    with open(argv[1], encoding="utf-8") as fh:
        spec = json.load(fh)
    notes = []
    if spec.get("expose"):
        _expose(spec["expose"], int(spec.get("uid", 65534)), spec["stage_dir"])
    if spec.get("hide"):
        failed = _hide(spec["hide"])
        if failed:
            notes.append("could not hide: " + "; ".join(failed))
    _set_limits(spec.get("limits", {}))
    _drop_privileges(spec)
    if spec.get("probe"):
        try:
            _probe(spec)
        except BaseException as exc:  # noqa: BLE001
            print(f"probe failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            os._exit(4)
        os._exit(0)
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-big write fails with EFBIG instead of killing us
    cap = int(spec.get("limits", {}).get("stream_chars", 1 << 20))
    sys.stdout = _CappedStream(1, cap)
    sys.stderr = _CappedStream(2, cap)
    for note in notes:
        print(f"[course grader] {note}", file=sys.stderr)
    os.chdir(spec.get("cwd", os.getcwd()))
    sys.path[:0] = list(spec["sys_path"])
    try:
        _run(spec)
    except BaseException as exc:  # noqa: BLE001 - the parent sees missing results
        try:
            print(f"[course grader] the child stopped: {_describe(exc)}", file=sys.stderr)
        except BaseException:
            pass
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(3)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv)

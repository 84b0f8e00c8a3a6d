"""Run untrusted code in a child process with limits, and always get control back.

The grader's parent never runs student code. For each submission it starts the
runner :mod:`course_lib.grading.child` as a separate process, in the strongest
sandbox the platform allows (see :func:`probe_sandbox`):

* ``"namespaces"`` - as root: ``unshare --mount --net --pid --fork
  --mount-proc``; the child hides the solutions, the output folder and the
  submissions under empty tmpfs mounts, then switches to the user *nobody*.
  No network; its processes live in a PID namespace, so *all* of them die with
  it (a detached ``fork`` + ``setsid`` grandchild included).
* ``"userns"`` - not root but user namespaces allowed: the same with
  ``--user --map-root-user``; the child then drops every capability (it keeps
  the grader's user id, so it could write where the grader's user can, except
  the hidden folders).
* ``"plain"`` - neither: the child runs as the grader's user (as *nobody* when
  the grader is root and nobody can run Python), with the network of the host.

In every mode: resource limits set soft = hard by the child before any course
or student code runs (address space, CPU seconds, file size, open files, no
core dumps), a scrubbed environment, standard input closed, output to
size-capped *files* (never pipes), its own session/process group, a
wall-clock timeout per chapter and per submission enforced from outside by
``SIGKILL`` of the whole tree, and - on Linux - the parent as a *child
subreaper*: a detached grandchild that escaped the process group is re-parented
to the grader and killed by :meth:`Supervisor.sweep` when the child ends,
before any report is written.

Source: the autograder issue and ``GRADER-NOTES.md`` (signal-based timeouts
are defeated; a ``setsid`` grandchild survives ``killpg`` and holds pipes
open; ``RLIMIT_AS`` of about 1000 MiB breaks ``import torch``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["Limits", "SandboxInfo", "Supervisor", "ChildRun", "probe_sandbox", "run_chapters", "child_sys_path"]

CHILD_SCRIPT = Path(__file__).with_name("child.py")
NOBODY_UID = 65534
NOBODY_GID = 65534
_PR_SET_CHILD_SUBREAPER = 36
_MEMORY_WORDS = ("MemoryError", "can't allocate memory", "Cannot allocate memory", "bad_alloc",
                 "failed to map segment", "out of memory", "OutOfMemory")


@dataclass(frozen=True)
class Limits:
    """Resource limits of one submission's child process.

    Attributes:
        chapter_timeout_s: wall-clock seconds allowed for one chapter (from the
            moment the child says it started it); on expiry the whole process
            tree is killed and the chapter scores 0 - the other chapters still
            run, in a new child.
        submission_timeout_s: wall-clock seconds for all chapters of one
            submission together (every child of that submission).
        startup_timeout_s: wall-clock seconds for a child to start (Python,
            ``import torch``, the cases) before its first chapter.
        memory_mb: address-space limit (``RLIMIT_AS``) in MiB, at least
            1024. ``import torch`` (one thread, as in the child) peaked at
            about 640 MiB of address space on the course's test machine; with
            many threads it needs more (``GRADER-NOTES.md``: ~1000 MiB failed).
        cpu_s: CPU seconds per child (``RLIMIT_CPU``; ``SIGKILL`` one second
            after ``SIGXCPU``). ``None``: the submission timeout.
        file_mb: largest file the child may write (``RLIMIT_FSIZE``), which
            also caps its stdout/stderr files, in MiB.
        stream_chars: characters of ``print``/``sys.stderr`` output kept per
            stream before the rest is cut (with a note).
        nofile: open file descriptors (``RLIMIT_NOFILE``).
        nproc: processes/threads of the child's user (``RLIMIT_NPROC``); only
            applied when the child runs under its own user id (nobody).
    """

    chapter_timeout_s: float = 60.0
    submission_timeout_s: float = 600.0
    startup_timeout_s: float = 120.0
    memory_mb: int = 4096
    cpu_s: int | None = None
    file_mb: int = 16
    stream_chars: int = 1 << 20
    nofile: int = 1024
    nproc: int = 512

    def __post_init__(self) -> None:
        for name in ("chapter_timeout_s", "submission_timeout_s", "startup_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Limits.{name} must be > 0 seconds; got {getattr(self, name)!r}")
        if self.memory_mb < 1024:
            raise ValueError(f"Limits.memory_mb must be >= 1024 MiB (import torch needs the room); got {self.memory_mb}")
        if self.file_mb < 1:
            raise ValueError(f"Limits.file_mb must be >= 1; got {self.file_mb}")

    def rlimits(self, own_uid: bool) -> dict:
        """The ``limits`` object of the child's spec (bytes and seconds)."""
        return {
            "as_bytes": int(self.memory_mb) << 20,
            "cpu_s": int(self.cpu_s if self.cpu_s is not None else max(1, round(self.submission_timeout_s))),
            "fsize_bytes": int(self.file_mb) << 20,
            "nofile": int(self.nofile),
            "nproc": int(self.nproc) if own_uid else None,
            "stream_chars": int(self.stream_chars),
        }


@dataclass
class SandboxInfo:
    """What the sandbox could and could not do on this platform (for the reports).

    Attributes:
        mode: ``"namespaces"``, ``"userns"`` or ``"plain"``.
        drop: ``"uid"`` (child runs as nobody), ``"caps"`` (user namespace,
            all capabilities dropped) or ``None`` (the grader's own user).
        network: whether the child has no network (its own empty network namespace).
        pid_namespace: whether all of the child's processes die with it.
        hides_paths: whether solutions/output/submissions are hidden from it.
        subreaper: whether escaped grandchildren are re-parented to the grader.
        notes: sentences for the report, one per limit that could not be applied.
    """

    mode: str
    drop: str | None
    network: bool
    pid_namespace: bool
    hides_paths: bool
    subreaper: bool
    notes: list[str] = field(default_factory=list)

    def describe(self) -> dict:
        """A JSON-able summary, with a plain-words statement per guarantee."""
        d = asdict(self)
        d["statement"] = {
            "network": "no network (own network namespace)" if self.network
            else "NOT isolated: the child can use the host's network",
            "processes": "own PID namespace: every process of the child dies with it" if self.pid_namespace
            else "process group killed; escaped grandchildren re-parented to the grader and killed"
            if self.subreaper else "process group killed; a detached grandchild may survive",
            "user": {"uid": "runs as nobody (65534)", "caps": "grader's user id, every capability dropped",
                     None: "runs as the grader's own user"}[self.drop],
            "hidden": "solutions, output folder and submissions hidden (empty tmpfs mounts)" if self.hides_paths
            else "NOT hidden: the child could read the solutions and other submissions if it knows their paths",
        }
        return d


class Supervisor:
    """Starts child processes and kills whatever they leave behind.

    One per grading run (it is shared by the worker threads). On Linux it makes
    the current process a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``),
    so that an orphaned descendant of a child - e.g. a ``fork`` + ``setsid``
    grandchild that escaped the process group - becomes a child of the grader
    and :meth:`sweep` can kill it. Because of this, run the grader as a process
    of its own (``python -m course_lib.grading``): :meth:`sweep` kills every
    child process of the current process that the supervisor did not start.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: set[int] = set()
        self._dying: set[int] = set()  # killed by kill_tree: reaped by sweep, not counted as strays
        #: HOME of a killed stray (the child's ``work/home``, from its environment) -> how many
        self.strays_by_home: dict[str, int] = {}
        #: a child's ``work/home`` -> the student it belongs to (set by the grader)
        self.owners: dict[str, str] = {}
        self.subreaper = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
                self.subreaper = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
            except OSError:  # pragma: no cover
                self.subreaper = False

    def spawn(self, argv: list[str], **kwargs) -> subprocess.Popen:
        """``subprocess.Popen(argv, **kwargs)`` in a new session, registered as ours."""
        with self._lock:
            proc = subprocess.Popen(argv, start_new_session=True, close_fds=True, **kwargs)
            self._active.add(proc.pid)
        return proc

    def kill_tree(self, proc: subprocess.Popen, wait_s: float = 10.0) -> None:
        """``SIGKILL`` the child, all its descendants and its process group; reap it (bounded wait)."""
        tree = _descendants(proc.pid)
        with self._lock:
            self._dying.update(tree)
        for pid in reversed(tree):
            _kill(pid)
        # A PID-namespace init takes a moment to die (it first kills its namespace): wait for the
        # tree to be gone before its parent, so that no half-dead process is re-parented to us.
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            procs = _procs()
            if all(p not in procs or procs[p][1] == "Z" for p in tree):
                break
            time.sleep(0.02)
        _kill(proc.pid)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL'ed processes exit
            pass
        with self._lock:
            self._active.discard(proc.pid)
            alive = _procs()
            self._dying = {p for p in self._dying if p in alive}

    def take_strays(self, home: str) -> int:
        """How many strays whose environment named ``HOME=home`` were killed so far (and forget them)."""
        with self._lock:
            return self.strays_by_home.pop(home, 0)

    def sweep(self, rounds: int = 20) -> int:
        """Kill and reap every child of this process that the supervisor did not start.

        Returns the number of processes killed.
        """
        killed = 0
        for _ in range(rounds):
            with self._lock:
                procs = _procs()
                strays = [p for p, (pp, _st) in procs.items() if pp == os.getpid() and p not in self._active]
                for pid in strays:
                    counted = procs[pid][1] != "Z" and pid not in self._dying
                    home = _home_of(pid) if counted else None
                    for sub in reversed(_descendants(pid)):
                        _kill(sub)
                    _kill(pid)
                    # a zombie, or a process kill_tree already killed, is not a stray: only reap it
                    if counted:
                        killed += 1
                        self.strays_by_home[home or "?"] = self.strays_by_home.get(home or "?", 0) + 1
                    self._dying.discard(pid)
            for pid in strays:
                _reap(pid)
            if not strays:
                break
            time.sleep(0.05)
        return killed


def _home_of(pid: int) -> str | None:
    """The ``HOME`` a process started with (read from ``/proc/PID/environ``), to tell whose stray it is."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = fh.read(1 << 16)
    except OSError:
        return None
    for item in env.split(b"\0"):
        if item.startswith(b"HOME="):
            return item[5:].decode(errors="replace")
    return None


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(pid: int, wait_s: float = 2.0) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done or time.monotonic() > deadline:
            return
        time.sleep(0.01)


def _procs() -> dict[int, tuple[int, str]]:
    """``{pid: (parent pid, state letter)}`` of every process visible in ``/proc``."""
    out: dict[int, tuple[int, str]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:  # pragma: no cover - not Linux
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
            fields = stat[stat.rindex(b")") + 2:].split()
            out[int(name)] = (int(fields[1]), fields[0].decode())
        except (OSError, ValueError, IndexError):
            continue
    return out


def _descendants(pid: int) -> list[int]:
    """Every descendant of ``pid`` (breadth first)."""
    kids: dict[int, list[int]] = {}
    for p, (pp, _state) in _procs().items():
        kids.setdefault(pp, []).append(p)
    out, todo = [], [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            if child not in out:
                out.append(child)
                todo.append(child)
    return out


# ---------------------------------------------------------------------------
# The child's command line, environment and import paths
# ---------------------------------------------------------------------------
def child_sys_path() -> list[str]:
    """The import paths of the child: the folder holding ``course_lib``, then site-packages.

    The child runs with ``python -I -S``: no current directory, no ``site``.
    These are the only extra entries, so nothing in the submission's folder is
    importable.
    """
    import course_lib

    paths = [str(Path(course_lib.__file__).resolve().parent.parent)]
    for key in ("purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p and os.path.isdir(p) and p not in paths:
            paths.append(p)
    for p in sys.path:  # e.g. a --user or PYTHONPATH install of torch
        if p and os.path.isdir(p) and p.rstrip("/").endswith(("site-packages", "dist-packages")) and p not in paths:
            paths.append(p)
    return paths


def _expose_paths(sys_path: list[str]) -> list[str]:
    """Paths the child must reach after switching to nobody (interpreter, stdlib, imports)."""
    paths = [os.path.realpath(sys.executable), sys.base_prefix, sys.prefix]
    for key in ("stdlib", "platstdlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            paths.append(p)
    paths.extend(sys_path)
    seen, out = set(), []
    for p in paths:
        p = os.path.realpath(p)
        if p not in seen and os.path.exists(p):
            seen.add(p)
            out.append(p)
    return out


def scrubbed_env(workdir: Path) -> dict[str, str]:
    """The whole environment of a child: no inherited variable at all."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(workdir / "home"),
        "TMPDIR": str(workdir / "tmp"),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MALLOC_ARENA_MAX": "2",
        "MPLBACKEND": "Agg",
    }


def _command(mode: str, spec_path: Path) -> list[str]:
    py = [sys.executable, "-I", "-S", "-B", str(CHILD_SCRIPT), str(spec_path)]
    unshare = shutil.which("unshare") or "unshare"
    if mode == "namespaces":
        return [unshare, "--mount", "--net", "--pid", "--fork", "--mount-proc", "--kill-child", *py]
    if mode == "userns":
        return [unshare, "--user", "--map-root-user", "--mount", "--net", "--pid", "--fork", "--mount-proc",
                "--kill-child", *py]
    return py


def make_workdir(base: Path, name: str, drop: str | None) -> Path:
    """Create a child's folder ``base/name`` with ``out/`` (results, progress), ``home/``, ``tmp/``, ``stage/``.

    When the child will run as nobody, its writable folders belong to nobody and
    the rest to root (read-only for the child).
    """
    work = base / name
    work.mkdir(mode=0o755)
    os.chmod(work, 0o755)
    for sub in ("submission", "tests"):
        (work / sub).mkdir(mode=0o755)
    (work / "stage").mkdir(mode=0o700)
    for sub in ("out", "out/results", "out/progress", "out/expected", "home", "tmp"):
        (work / sub).mkdir(mode=0o700)
        if drop == "uid":
            os.chown(work / sub, NOBODY_UID, NOBODY_GID)
    return work


def reset_out(work: Path, drop: str | None) -> None:
    """Empty ``progress/`` between two children of the same submission (results are kept)."""
    progress = work / "out" / "progress"
    shutil.rmtree(progress, ignore_errors=True)
    progress.mkdir(mode=0o700)
    if drop == "uid":
        os.chown(progress, NOBODY_UID, NOBODY_GID)


def _spec(work: Path, *, info: SandboxInfo, limits: Limits, sys_path: list[str], cases_files: list[str],
          chapters: list[str], hide: list[str], expected: bool = False, probe: bool = False,
          meta_path: str | None = None) -> dict:
    hide_ok = [h for h in hide if not _is_ancestor_or_same(h, str(work)) and not any(
        _is_ancestor_or_same(h, p) for p in sys_path)]
    return {
        "sys_path": sys_path,
        "cases_files": cases_files,
        "notebooks_dir": str(work / "submission"),
        "results_dir": str(work / "out" / "results"),
        "expected_dir": str(work / "out" / "expected"),
        "progress_dir": str(work / "out" / "progress"),
        "stage_dir": str(work / "stage"),
        "cwd": str(work / "home"),
        "chapters": chapters,
        "expected": expected,
        "probe": probe,
        "meta_path": meta_path,
        "limits": limits.rlimits(own_uid=info.drop == "uid"),
        "hide": hide_ok if info.hides_paths else [],
        "expose": _expose_paths(sys_path) if (info.drop == "uid" and info.pid_namespace) else [],
        "drop": info.drop,
        "uid": NOBODY_UID,
        "gid": NOBODY_GID,
    }


def _is_ancestor_or_same(a: str, b: str) -> bool:
    a, b = os.path.realpath(a), os.path.realpath(b)
    return b == a or b.startswith(a.rstrip("/") + "/")


def _write_spec(work: Path, spec: dict, name: str) -> Path:
    path = work / name
    path.write_text(json.dumps(spec, indent=1), encoding="utf-8")
    os.chmod(path, 0o644)
    return path


# ---------------------------------------------------------------------------
# Probing the platform
# ---------------------------------------------------------------------------
def probe_sandbox(base: Path, supervisor: Supervisor, requested: str = "auto") -> SandboxInfo:
    """Find the strongest sandbox that works here by starting a tiny child in it.

    Args:
        base: a private temporary folder for the probe's work folder.
        supervisor: the run's :class:`Supervisor`.
        requested: ``"auto"`` (strongest available), ``"namespaces"``,
            ``"userns"`` or ``"plain"`` (weaker, e.g. to test the fallbacks).

    Returns:
        the :class:`SandboxInfo` of the first configuration whose child could
        drop its privileges and still find numpy, torch and ``course_lib``.

    Raises:
        RuntimeError: ``requested`` names a mode that does not work here, or
            not even the plain child can start.
        ValueError: unknown ``requested``.
    """
    if requested not in ("auto", "namespaces", "userns", "plain"):
        raise ValueError(f"sandbox must be auto, namespaces, userns or plain; got {requested!r}")
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    linux = sys.platform.startswith("linux")
    has_unshare = linux and shutil.which("unshare") is not None
    candidates: list[SandboxInfo] = []
    if has_unshare and root:
        candidates.append(SandboxInfo("namespaces", "uid", True, True, True, supervisor.subreaper))
    if has_unshare and not root:
        candidates.append(SandboxInfo("userns", "caps", True, True, True, supervisor.subreaper))
    if root:
        candidates.append(SandboxInfo("plain", "uid", False, False, False, supervisor.subreaper))
    candidates.append(SandboxInfo("plain", None, False, False, False, supervisor.subreaper))
    if requested != "auto":
        candidates = [c for c in candidates if c.mode == requested]
        if not candidates:
            raise RuntimeError(f"--sandbox {requested} is not possible here (root={root}, unshare={has_unshare})")
    sys_path = child_sys_path()
    failures = []
    for n, info in enumerate(candidates):
        work = make_workdir(base, f"probe-{n}", info.drop)
        spec = _spec(work, info=info, limits=Limits(), sys_path=sys_path, cases_files=[], chapters=[],
                     hide=[], probe=True)
        spec_path = _write_spec(work, spec, "spec.json")
        log = work / "probe.log"
        with open(log, "wb") as err:
            proc = supervisor.spawn(_command(info.mode, spec_path), cwd=str(work), env=scrubbed_env(work),
                                    stdin=subprocess.DEVNULL, stdout=err, stderr=err)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
            supervisor.kill_tree(proc)
        supervisor.sweep()
        ok = proc.returncode == 0 and (work / "out" / "results" / "probe.json").is_file()
        if ok:
            break
        failures.append(f"{info.mode}/{info.drop}: {log.read_text(errors='replace')[-300:].strip()}")
    else:
        raise RuntimeError("no sandbox configuration could start the grading child:\n" + "\n".join(failures))
    if failures:
        info.notes.append("stronger sandboxes failed here: " + " | ".join(failures))
    if not info.network:
        info.notes.append("network not isolated: no network namespace on this platform "
                          "(needs root or unprivileged user namespaces, and the unshare command)")
    if not info.pid_namespace:
        info.notes.append("no PID namespace: detached grandchildren are killed by the subreaper sweep"
                          if info.subreaper else "no PID namespace and no subreaper: a detached grandchild may survive")
    if not info.hides_paths:
        info.notes.append("solutions/output/submissions not hidden from the child (no mount namespace); "
                          "the static checks flag references to them")
    if info.drop is None:
        info.notes.append("the child runs as the grader's own user (not root, no user namespaces)")
    return info


# ---------------------------------------------------------------------------
# Running one submission's chapters
# ---------------------------------------------------------------------------
@dataclass
class ChildRun:
    """What the parent itself observed while a submission's children ran.

    Attributes:
        chapter_status: chapter -> ``"ok"`` (the child said it finished it),
            ``"timeout"`` (killed by the wall clock) or ``"crashed"`` (the
            child died first). Only the *status label* relies on the child's
            progress files; scores rely only on the result arrays.
        launches: children started (a new one after each crash/timeout).
        seconds: wall-clock seconds, all children together.
        output_bytes: bytes written to stdout/stderr, per launch.
        output_cut: whether a stream hit its size cap (a flood).
        stderr_tail: the last characters of the children's stderr (untrusted).
        memory_signs: whether the stderr tail shows a memory failure.
        killed_strays: processes killed by the subreaper sweep.
    """

    chapter_status: dict[str, str] = field(default_factory=dict)
    launches: int = 0
    seconds: float = 0.0
    output_bytes: list[int] = field(default_factory=list)
    output_cut: bool = False
    stderr_tail: str = ""
    memory_signs: bool = False
    killed_strays: int = 0


def _markers(progress: Path) -> set[str]:
    try:
        if progress.is_symlink() or not progress.is_dir():
            return set()
        return set(os.listdir(progress))
    except OSError:
        return set()


def _tail(path: Path, n: int) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - n))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def run_chapters(work: Path, *, supervisor: Supervisor, info: SandboxInfo, limits: Limits, sys_path: list[str],
                 cases_files: list[str], chapters: list[str], hide: list[str], expected: bool = False,
                 meta_path: str | None = None) -> ChildRun:
    """Run the cases of ``chapters`` for the submission in ``work``; return what the parent saw.

    One child runs the chapters in order. If it dies or is killed, the chapter
    it was in is marked ``crashed``/``timeout`` and a new child runs the
    chapters it had not started, until all are done or the submission's time
    is spent (then the rest are ``timeout``). After every child: the whole
    process tree is killed and strays swept, so nothing runs when the parent
    reads ``work/out/results``.
    """
    run = ChildRun()
    start = time.monotonic()
    deadline = start + limits.submission_timeout_s
    remaining = list(chapters)
    while remaining:
        if time.monotonic() >= deadline:
            for ch in remaining:
                run.chapter_status[ch] = "timeout"
            break
        run.launches += 1
        reset_out(work, info.drop)
        spec = _spec(work, info=info, limits=limits, sys_path=sys_path, cases_files=cases_files,
                     chapters=remaining, hide=hide, expected=expected, meta_path=meta_path)
        spec_path = _write_spec(work, spec, f"spec-{run.launches}.json")
        out_path, err_path = work / f"stdout-{run.launches}.log", work / f"stderr-{run.launches}.log"
        progress = work / "out" / "progress"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            os.chmod(out_path, 0o600)
            os.chmod(err_path, 0o600)
            proc = supervisor.spawn(_command(info.mode, spec_path), cwd=str(work), env=scrubbed_env(work),
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=err)
            launched = last_event = time.monotonic()
            seen: set[str] = set()
            timed_out = False
            try:
                while True:
                    if proc.poll() is not None:
                        break
                    now = time.monotonic()
                    marks = _markers(progress)
                    if marks - seen:
                        seen |= marks
                        last_event = now
                    allowance = limits.chapter_timeout_s + (limits.startup_timeout_s if "ready" not in seen else 0)
                    if now >= deadline or now - last_event > allowance:
                        timed_out = True
                        break
                    time.sleep(0.05 if now - launched < 2 else 0.15)
            finally:
                supervisor.kill_tree(proc)
                supervisor.sweep()
                run.killed_strays += supervisor.take_strays(str(work / "home"))
        marks = _markers(progress)
        done = [ch for ch in remaining if f"{ch}.done" in marks]
        for ch in done:
            run.chapter_status[ch] = "ok"
        left = [ch for ch in remaining if ch not in done]
        sizes = [p.stat().st_size for p in (out_path, err_path)]
        run.output_bytes.extend(sizes)
        if any(s >= (limits.file_mb << 20) for s in sizes) or any(
                "output cut here" in _tail(p, 300) for p in (out_path, err_path)):
            run.output_cut = True
        tail = _tail(err_path, 4000)
        run.stderr_tail = (run.stderr_tail + tail)[-4000:]
        if not left:
            break
        blamed = left[0]
        if timed_out:
            if time.monotonic() >= deadline:
                for ch in left:
                    run.chapter_status[ch] = "timeout"
                break
            run.chapter_status[blamed] = "timeout"
        else:
            run.chapter_status[blamed] = "crashed"
            if any(w in tail for w in _MEMORY_WORDS):
                run.memory_signs = True
            if "ready" not in marks:  # the child never got going: another one would not either
                for ch in left:
                    run.chapter_status[ch] = "crashed"
                break
        remaining = left[1:]
    run.seconds = time.monotonic() - start
    return run


def remove_tree(path: Path) -> None:
    """``shutil.rmtree`` that also removes folders a child made unreadable."""
    def fix(func, p, _exc):
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=fix)

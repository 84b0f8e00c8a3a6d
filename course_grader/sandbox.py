"""Run untrusted code in a child process with limits, and always get control back.

The grader's parent never runs student code. It starts the runner
:mod:`course_grader.child` as a separate process in a sandbox built from
the kernel's own mechanisms (see :func:`probe_sandbox`):

* ``"namespaces"`` - the grader runs as root: ``unshare --mount --net --pid
  --ipc --uts --cgroup --fork --mount-proc``; the child covers the solutions, the output
  folder and the submissions with empty tmpfs mounts, gets a private,
  size-capped ``/tmp`` (also behind ``/var/tmp``, ``/dev/shm``,
  ``/run/lock``), remounts everything else read-only and becomes *nobody*.
  Each child also gets its own cgroup (where the kernel offers one): a CPU
  quota of one core, a process count and a memory limit; the cgroup files
  themselves are out of its sight (an empty mount over ``/sys/fs/cgroup``).
* ``"userns"`` - not root but unprivileged user namespaces work: the same with
  ``--user --map-root-user``; the child drops every capability instead of
  switching user.
* ``"nobody"`` - root without namespaces (e.g. a Gradescope container): the
  child runs as *nobody* in the host's file system and network. The grader
  checks that nobody cannot reach the solutions, the tests and the reports (or
  refuses, naming the ``chmod`` that fixes it), and accepts this mode only for
  one submission per run (``--single``, a fresh container per submission), since
  ``/tmp`` is shared with the next submission otherwise. Its limit: every
  world-readable file on the host is readable by the child (``gradescope/setup.sh``
  leaves one copy of the solutions and the cases, readable by root only).
* ``"unsafe"`` - none of these: the child runs as the grader's own user, on the
  host's network, seeing the host's files. Only with ``--unsafe-sandbox``; the
  grader otherwise refuses with a message that names the fix.

In every mode: resource limits set soft = hard by the child before any student
code runs, a scrubbed environment, standard input closed, output to
size-capped *files*, and results on a pipe the parent reads with its own clock
(:class:`ChildSession`): a chapter's time starts when the parent sends its
command and ends at the parent's deadline, whatever the child writes. After a
child ends, its PID namespace (or cgroup) takes every process of the child
with it, ``setsid`` ones included; the parent is also a *child subreaper* and
sweeps strays.

Design and threat model: ``course_grader/SECURITY.md``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import protocol as PROTOCOL
from .protocol import ChildRequest, protocol_problem

__all__ = ["Limits", "SandboxInfo", "Supervisor", "ChildRun", "ChildSpec", "probe_sandbox", "run_chapters",
           "child_sys_path", "child_request", "needed_paths", "make_workdir", "remove_tree", "nobody_can_reach",
           "CHILD_SCRIPT", "UnsafeSandboxError", "Unit", "plan_units", "PlanError"]

CHILD_SCRIPT = Path(__file__).with_name("child.py")
NOBODY_UID = 65534
NOBODY_GID = 65534
_PR_SET_CHILD_SUBREAPER = 36
#: the environment variable that names the child a process descends from (:meth:`Supervisor.take_strays`)
OWNER_VARIABLE = "COURSE_GRADER_CHILD"
#: the largest single message and the most bytes one submission's children may send the parent
#: (a student's results are a few KiB per case; the trusted reference run also sends inputs)
MAX_MESSAGE_BYTES = {"student": 4 << 20, "reference": 16 << 20, "probe": 1 << 20}
MAX_CHANNEL_BYTES = 32 << 20
#: characters kept of a child's error text
MAX_ERROR_CHARS = 4000


class UnsafeSandboxError(RuntimeError):
    """No sandbox that can protect the grades works here, and ``--unsafe-sandbox`` was not given."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one submission's child process.

    Attributes:
        chapter_timeout_s: wall-clock seconds for one chapter, measured by the
            parent from the moment it sends the chapter's command; results that
            arrive later do not count. On expiry the whole child is killed and
            the remaining chapters run in a new child.
        submission_timeout_s: wall-clock seconds for all chapters of one
            submission together (every child of that submission).
        startup_timeout_s: wall-clock seconds for a child to start (Python,
            ``import torch``, the cases) before its first chapter.
        memory_mb: address space (``RLIMIT_AS``) and, with a memory cgroup,
            resident memory plus scratch files, in MiB; at least 1024
            (``import torch`` needs the room, see ``SECURITY.md``).
        cpu_s: CPU seconds per child (``RLIMIT_CPU``). ``None``: the submission timeout.
        file_mb: largest file the child may write (``RLIMIT_FSIZE``), which
            also caps its stdout/stderr files, in MiB.
        scratch_mb: size of the child's private ``/tmp`` (all its writable
            places together), in MiB.
        cpu_cores: CPU quota of one child (cgroup), in cores.
        stream_chars: characters of ``print``/``sys.stderr`` output kept per stream.
        nofile: open file descriptors (``RLIMIT_NOFILE``).
        nproc: processes and threads of one child (cgroup ``pids.max``; without
            a pids cgroup, ``RLIMIT_NPROC`` of the child's user).
    """

    chapter_timeout_s: float = 60.0
    submission_timeout_s: float = 600.0
    startup_timeout_s: float = 120.0
    memory_mb: int = 4096
    cpu_s: int | None = None
    file_mb: int = 16
    scratch_mb: int = 256
    cpu_cores: float = 1.0
    stream_chars: int = 1 << 20
    nofile: int = 1024
    nproc: int = 512

    def __post_init__(self) -> None:
        for name in ("chapter_timeout_s", "submission_timeout_s", "startup_timeout_s", "cpu_cores"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Limits.{name} must be > 0; got {getattr(self, name)!r}")
        if self.memory_mb < 1024:
            raise ValueError(f"Limits.memory_mb must be >= 1024 MiB (import torch needs the room); got {self.memory_mb}")
        for name in ("file_mb", "scratch_mb"):
            if getattr(self, name) < 1:
                raise ValueError(f"Limits.{name} must be >= 1; got {getattr(self, name)!r}")

    def rlimits(self, own_uid: bool, pids_cgroup: bool) -> dict:
        """The ``limits`` object of the child's spec (bytes and seconds)."""
        return {
            "as_bytes": int(self.memory_mb) << 20,
            "cpu_s": int(self.cpu_s if self.cpu_s is not None else max(1, round(self.submission_timeout_s))),
            "fsize_bytes": int(self.file_mb) << 20,
            "nofile": int(self.nofile),
            "nproc": int(self.nproc) if own_uid and not pids_cgroup else None,
            "stream_chars": int(self.stream_chars),
        }


@dataclass
class SandboxInfo:
    """What the sandbox does on this platform (for the reports); every field was checked by the probe.

    Attributes:
        mode: ``"namespaces"``, ``"userns"``, ``"nobody"`` or ``"unsafe"``.
        drop: ``"uid"`` (child runs as nobody), ``"caps"`` (user namespace,
            all capabilities dropped) or ``None`` (the grader's own user).
        network: the child has no network (its own empty network namespace).
        pid_namespace: all of the child's processes die with it.
        ipc_namespace: System V IPC objects die with it.
        hides_paths: solutions, output folder and submissions are covered.
        private_tmp: ``/tmp``, ``/var/tmp``, ``/dev/shm``, ``/run/lock`` are one private size-capped tmpfs.
        read_only_host: every other mount is read-only for the child.
        cgroups: controllers of the child's own cgroup (``cpu``, ``pids``, ``memory``), empty if none.
        subreaper: escaped grandchildren are re-parented to the grader.
        permissions_checked: (``nobody`` mode) the grader checked that nobody cannot reach what it must not read.
        keyrings_denied: a seccomp filter makes the kernel keyring calls fail (they are not namespaced).
        host_covered: every top-level folder outside the system's is covered but for the paths the child needs.
        cgroups_hidden: the child sees no cgroup files (its own cgroup namespace, an empty mount over
            ``/sys/fs/cgroup``): no child can read another's memory or process counts.
        userns_denied: the seccomp filter makes creating a user namespace fail (``unshare``/``clone`` with
            ``CLONE_NEWUSER``; ``clone3``).
        locks_neutral: the seccomp filter makes ``flock`` and the ``fcntl`` lock commands no-ops (they return 0
            and lock nothing), so no child sees another's lock on a file both can read.
        watches_denied: the seccomp filter denies ``inotify_*`` and ``fanotify_init`` (ENOSYS), so no child
            watches another open or read a file both can read.
        weakened: why the stronger sandboxes this machine should allow failed (empty when none did); the
            grader says so on stderr and in its closing line, not only here.
        notes: sentences for the report, one per limit that could not be applied.
    """

    mode: str
    drop: str | None
    network: bool
    pid_namespace: bool
    ipc_namespace: bool
    hides_paths: bool
    private_tmp: bool = False
    read_only_host: bool = False
    cgroups: list[str] = field(default_factory=list)
    subreaper: bool = False
    permissions_checked: bool = False
    keyrings_denied: bool = False
    host_covered: bool = False
    cgroups_hidden: bool = False
    userns_denied: bool = False
    locks_neutral: bool = False
    watches_denied: bool = False
    weakened: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def safe(self) -> bool:
        """Whether the isolation protects the grades of a batch (no reference readable, nothing kept)."""
        return self.mode in ("namespaces", "userns") and self.hides_paths and self.private_tmp

    def describe(self) -> dict:
        """A JSON-able summary, with a plain-words statement per guarantee."""
        d = asdict(self)
        d["safe"] = self.safe
        d["statement"] = {
            "network": "no network (own network namespace)" if self.network
            else "NOT isolated: the child can use the host's network",
            "processes": "own PID namespace: every process of the child dies with it" if self.pid_namespace
            else "process group killed; escaped grandchildren re-parented to the grader and killed"
            if self.subreaper else "process group killed; a detached grandchild may survive",
            "ipc": "own IPC namespace: shared-memory segments and queues die with the child" if self.ipc_namespace
            else "NOT isolated: System V IPC objects may survive the child",
            "user": {"uid": "runs as nobody (65534)", "caps": "grader's user id inside a user namespace, "
                     "every capability dropped", None: "runs as the grader's own user"}[self.drop],
            "files": ("solutions, output folder and submissions covered"
                      + ("; every folder outside the system's (/home, /opt, /srv, /var, ...) covered but for "
                         "Python, the imports and the work folder" if self.host_covered else "")
                      + "; a private size-capped /tmp (also /var/tmp, /dev/shm, /run/lock) that vanishes with the child"
                      + ("; everything else read-only" if self.read_only_host else
                         "; NOT every other mount could be made read-only"))
            if self.hides_paths and self.private_tmp else
            ("solutions, tests and reports unreadable by nobody (permissions checked); /tmp and other shared "
             "places are the host's: one submission per container (--single)")
            if self.mode == "nobody" and self.permissions_checked else
            "NOT isolated: the child can read and write what the grader's user can",
            "keyrings": "kernel keyrings denied (seccomp): no channel between students through them"
            if self.keyrings_denied else "NOT denied: kernel keyrings could pass data between students",
            "cgroup_files": "hidden (own cgroup namespace, empty mount over /sys/fs/cgroup): no child reads "
            "another's memory use or process count" if self.cgroups_hidden
            else "NOT hidden: the child can read the host's cgroup files (every child's memory use)",
            "user_namespaces": "creating one is denied (seccomp): no capabilities inside a new namespace"
            if self.userns_denied else "NOT denied: the child can create a user namespace",
            "file_locks": "no-ops (seccomp): flock and the fcntl lock commands return 0 and lock nothing, so no "
            "child sees another's lock on a file both can read" if self.locks_neutral
            else "NOT neutralised: a lock on a file two children can read could pass data between them",
            "file_watches": "denied (seccomp): no inotify or fanotify, so no child sees another open or read a "
            "shared file" if self.watches_denied
            else "NOT denied: an inotify watch on a file two children can read could pass data between them",
            "cpu_memory": (f"own cgroup ({', '.join(self.cgroups)}): CPU quota, process count and memory per child"
                           if self.cgroups else "no cgroup: CPU share and memory bounded only by rlimits"),
        }
        return d


# ---------------------------------------------------------------------------
# cgroups: one per child, for CPU quota, process count and memory
# ---------------------------------------------------------------------------
def _cgroup_mounts() -> dict[str, str]:
    """controller -> folder of this process's own cgroup in it (v1), or ``{"v2": folder}``."""
    mounts: dict[str, str] = {}
    own: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as fh:
            for line in fh:
                _hid, controllers, path = line.rstrip("\n").split(":", 2)
                for c in (controllers.split(",") if controllers else ["v2"]):
                    own[c] = path
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                fields, rfields = left.split(), right.split()
                if len(fields) < 5 or not rfields:
                    continue
                point, fstype, options = fields[4], rfields[0], rfields[-1]
                if fstype == "cgroup2":
                    mounts.setdefault("v2", point)
                elif fstype == "cgroup":
                    for c in ("cpu", "pids", "memory"):
                        if c in options.split(","):
                            mounts.setdefault(c, point)
    except OSError:
        return {}
    out = {}
    for c, point in mounts.items():
        below = os.path.join(point, own.get(c, "/").lstrip("/"))
        out[c] = below if os.path.isdir(below) else point
    return out


class ChildCgroup:
    """The cgroup(s) of one child: created before it starts, emptied and removed after it ends."""

    def __init__(self, folders: dict[str, str]) -> None:
        self.folders = folders  # controller -> folder

    @classmethod
    def create(cls, name: str, limits: Limits) -> "ChildCgroup | None":
        """A new cgroup with the limits set; ``None`` where the kernel offers none we may write."""
        mounts = _cgroup_mounts()
        folders: dict[str, str] = {}
        try:
            if all(c in mounts for c in ("cpu", "pids", "memory")):  # cgroup v1
                for c in ("cpu", "pids", "memory"):
                    os.mkdir(os.path.join(mounts[c], name), 0o755)  # fails on a name in use: never ours to remove
                    folders[c] = os.path.join(mounts[c], name)
                period = 100_000
                _write(folders["cpu"], "cpu.cfs_period_us", period)
                _write(folders["cpu"], "cpu.cfs_quota_us", int(period * limits.cpu_cores))
                _write(folders["pids"], "pids.max", limits.nproc)
                _write(folders["memory"], "memory.limit_in_bytes", limits.memory_mb << 20)
            elif "v2" in mounts and {"cpu", "pids", "memory"} <= set(_read(mounts["v2"], "cgroup.subtree_control").split()):
                os.mkdir(os.path.join(mounts["v2"], name), 0o755)
                folders["v2"] = os.path.join(mounts["v2"], name)
                _write(folders["v2"], "cpu.max", f"{int(100_000 * limits.cpu_cores)} 100000")
                _write(folders["v2"], "pids.max", limits.nproc)
                _write(folders["v2"], "memory.max", limits.memory_mb << 20)
                _write(folders["v2"], "memory.swap.max", 0, required=False)
            else:
                return None
        except OSError:
            cls(folders).remove()
            return None
        return cls(folders)

    @property
    def controllers(self) -> list[str]:
        return ["cpu", "pids", "memory"]

    @property
    def procs_files(self) -> list[str]:
        return [os.path.join(f, "cgroup.procs") for f in self.folders.values()]

    def pids(self) -> set[int]:
        out: set[int] = set()
        for path in self.procs_files:
            try:
                out.update(int(x) for x in _read(os.path.dirname(path), "cgroup.procs").split())
            except (OSError, ValueError):
                pass
        return out

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of this cgroup for memory."""
        for c, folder in self.folders.items():
            name = "memory.oom_control" if c == "memory" else "memory.events" if c == "v2" else None
            if name:
                try:
                    for line in _read(folder, name).splitlines():
                        key, _, value = line.partition(" ")
                        if key in ("oom_kill", "oom") and int(value) > 0:
                            return True
                except (OSError, ValueError):
                    pass
        return False

    def kill_all(self, rounds: int = 200) -> None:
        """SIGKILL every process in the cgroup until it is empty (a fork loop is bounded by ``pids.max``)."""
        if "v2" in self.folders:
            _write(self.folders["v2"], "cgroup.kill", 1, required=False)
        for _ in range(rounds):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                _kill(pid)
            time.sleep(0.01)

    def remove(self, wait_s: float = 10.0) -> None:
        """Remove the folders once the killed processes have left them (on a busy machine a dying process
        can stay listed for seconds: a folder removed too early would be left behind)."""
        deadline = time.monotonic() + wait_s
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.02)
        for folder in self.folders.values():
            for _ in range(50):
                try:
                    os.rmdir(folder)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _read(folder: str, name: str) -> str:
    with open(os.path.join(folder, name), encoding="ascii") as fh:
        return fh.read()


def _write(folder: str, name: str, value, required: bool = True) -> None:
    try:
        with open(os.path.join(folder, name), "w", encoding="ascii") as fh:
            fh.write(str(value))
    except OSError:
        if required:
            raise


# ---------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------
class Supervisor:
    """Starts child processes and kills whatever they leave behind.

    One per grading run (shared by the worker threads). On Linux it makes the
    current process a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``), so
    that an orphaned descendant of a child becomes a child of the grader and
    :meth:`sweep` can kill it. Because of this, run the grader as a process of
    its own (``python -m course_grader``): :meth:`sweep` kills every child
    process of the current process that the supervisor did not start.

    A stray is counted for the child it came from, not for the one whose end
    happened to find it (with ``--jobs 2`` either child's sweep may): each
    child gets an ``owner`` token in its environment (:data:`OWNER_VARIABLE`),
    which its descendants inherit; :meth:`take_strays` hands a child the count
    of its own. A stray without a known token is counted in ``unattributed``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: set[int] = set()
        self._dying: set[int] = set()
        self._owners: set[str] = set()
        self._strays_of: dict[str, int] = {}
        self.strays = 0
        self.unattributed = 0
        self.subreaper = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
                self.subreaper = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
            except OSError:  # pragma: no cover
                self.subreaper = False

    def spawn(self, argv: list[str], owner: str | None = None, **kwargs) -> subprocess.Popen:
        """``subprocess.Popen(argv, **kwargs)`` in a new session, registered as ours.

        ``owner``: the token of :meth:`take_strays`, put in the child's environment (``kwargs["env"]``).
        """
        if owner is not None:
            kwargs["env"] = {**(kwargs.get("env") or {}), OWNER_VARIABLE: owner}
        with self._lock:
            if owner is not None:
                self._owners.add(owner)
            proc = subprocess.Popen(argv, start_new_session=True, **kwargs)
            self._active.add(proc.pid)
        return proc

    def take_strays(self, owner: str) -> int:
        """How many strays of the child with token ``owner`` any sweep so far killed (counted once)."""
        with self._lock:
            return self._strays_of.pop(owner, 0)

    def kill_tree(self, proc: subprocess.Popen, cgroup: ChildCgroup | None = None, wait_s: float = 10.0) -> None:
        """``SIGKILL`` the child, its descendants, its process group and its cgroup; reap it (bounded wait)."""
        tree = _descendants(proc.pid)
        with self._lock:
            self._dying.update(tree)
        for pid in reversed(tree):
            _kill(pid)
        if cgroup is not None:
            cgroup.kill_all()
        deadline = time.monotonic() + 3.0  # a PID-namespace init first kills its namespace
        while time.monotonic() < deadline:
            procs = _procs()
            if all(p not in procs or procs[p][1] == "Z" for p in tree):
                break
            time.sleep(0.02)
        _kill(proc.pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL'ed processes exit
            pass
        with self._lock:
            self._active.discard(proc.pid)
            alive = _procs()
            self._dying = {p for p in self._dying if p in alive}

    def sweep(self, rounds: int = 20) -> int:
        """Kill and reap every child of this process that the supervisor did not start; return how many."""
        killed = 0
        for _ in range(rounds):
            with self._lock:
                procs = _procs()
                strays = [p for p, (pp, _st) in procs.items() if pp == os.getpid() and p not in self._active]
                for pid in strays:
                    counted = procs[pid][1] != "Z" and pid not in self._dying
                    owner = _owner_of(pid) if counted else None  # read before the kill
                    for sub in reversed(_descendants(pid)):
                        _kill(sub)
                    _kill(pid)
                    if counted:
                        killed += 1
                        if owner in self._owners:
                            self._strays_of[owner] = self._strays_of.get(owner, 0) + 1
                        else:
                            self.unattributed += 1
                    self._dying.discard(pid)
                self.strays += killed
            for pid in strays:
                _reap(pid)
            if not strays:
                break
            time.sleep(0.05)
        return killed


def _owner_of(pid: int) -> str | None:
    """The :data:`OWNER_VARIABLE` in the environment of process ``pid`` (``None`` when it has none)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            environ = fh.read(1 << 20)
    except OSError:
        return None
    key = OWNER_VARIABLE.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(key):
            return entry[len(key):].decode("ascii", errors="replace")
    return None


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


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
    These are the only extra entries, so nothing in the submission's folder is importable.
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


def needed_paths(sys_path: list[str]) -> list[str]:
    """Paths the child must reach after switching to nobody (interpreter, stdlib, imports)."""
    paths = [os.path.dirname(os.path.realpath(sys.executable)), sys.base_prefix, sys.prefix]
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


def scrubbed_env(workdir: Path, private_tmp: bool) -> dict[str, str]:
    """The whole environment of a child: no inherited variable at all."""
    home, tmp = ("/tmp/home", "/tmp") if private_tmp else (str(workdir / "home"), str(workdir / "tmp"))
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": tmp,
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


def _command(mode: str, spec_path: Path, cgroup: ChildCgroup | None) -> list[str]:
    py = [sys.executable, "-I", "-S", "-B", str(CHILD_SCRIPT), str(spec_path)]
    unshare = shutil.which("unshare") or "unshare"
    namespaces = ["--mount", "--net", "--pid", "--ipc", "--uts", "--cgroup", "--fork", "--mount-proc",
                  "--kill-child"]
    if mode == "namespaces":
        cmd = [unshare, *namespaces, *py]
    elif mode == "userns":
        cmd = [unshare, "--user", "--map-root-user", *namespaces, *py]
    else:
        cmd = py
    if cgroup is None:
        return cmd
    # The shell joins the cgroup before anything else runs, so that every later process is inside it.
    script = 'for f in $COURSE_CGROUP; do echo $$ > "$f" || exit 97; done; unset COURSE_CGROUP; exec "$@"'
    return ["/bin/sh", "-c", script, "sh", *cmd]


def make_workdir(base: Path, name: str, drop: str | None) -> Path:
    """Create a child's folder ``base/name`` with ``submission/``, ``tests/``, ``stage/``, ``home/``, ``tmp/``.

    Everything in it belongs to the grader and is read-only for the child;
    ``home``/``tmp`` are used only by the unsafe sandbox (elsewhere the child
    writes only to its private tmpfs).
    """
    work = base / name
    work.mkdir(mode=0o755)
    os.chmod(work, 0o755)
    for sub in ("submission", "tests"):
        (work / sub).mkdir(mode=0o755)
    (work / "stage").mkdir(mode=0o700)
    for sub in ("home", "tmp"):
        (work / sub).mkdir(mode=0o700)
        if drop == "uid":
            os.chown(work / sub, NOBODY_UID, NOBODY_GID)
    return work


def _is_ancestor_or_same(a: str, b: str) -> bool:
    a, b = os.path.realpath(a), os.path.realpath(b)
    return b == a or b.startswith(a.rstrip("/") + "/")


def nobody_can_reach(path: str) -> bool:
    """Whether the user nobody (no supplementary groups) can get into ``path``.

    True unless some folder on the way (``path`` itself included) denies nobody
    the right to traverse it: not owned by nobody, and no ``x`` for *other*
    (nor for the group, when the group is nobody's).
    """
    parts = os.path.realpath(path).split("/")
    for i in range(1, len(parts) + 1):
        folder = "/".join(parts[:i]) or "/"
        try:
            st = os.stat(folder)
        except OSError:
            return False
        if st.st_uid != NOBODY_UID and not (st.st_mode & 0o001 or (st.st_gid == NOBODY_GID and st.st_mode & 0o010)):
            return False
    return True


@dataclass
class ChildSpec:
    """What the grader asks of one child; :func:`child_request` adds how it isolates itself (``spec-N.json``).

    Attributes:
        mode: ``"student"``, ``"reference"`` or ``"probe"``.
        cases_files: the cases files to load (student copies in student mode).
        hide: folders to cover with empty tmpfs mounts.
        salt: the reference run's secret (reference mode only).
        check_files: student copies of the cases files, which the reference run loads to check that
            they carry no expected value.
    """

    mode: str
    cases_files: list[str] = field(default_factory=list)
    hide: list[str] = field(default_factory=list)
    salt: str | None = None
    check_files: list[str] = field(default_factory=list)


def child_request(work: Path, spec: ChildSpec, *, info: SandboxInfo, limits: Limits, sys_path: list[str],
                  result_fd: int, command_fd: int) -> ChildRequest:
    """The :class:`~course_grader.protocol.ChildRequest` telling one child what to do and how to isolate itself."""
    needed = needed_paths(sys_path)
    hide = [h for h in spec.hide if not _is_ancestor_or_same(h, str(work)) and not any(
        _is_ancestor_or_same(h, p) for p in needed)]
    isolated = info.mode in ("namespaces", "userns")
    return ChildRequest(
        mode=spec.mode,
        salt=spec.salt,
        sys_path=list(sys_path),
        cases_files=list(spec.cases_files),
        check_files=list(spec.check_files),
        stage_dir=str(work / "stage"),
        result_fd=result_fd,
        command_fd=command_fd,
        limits=limits.rlimits(own_uid=info.drop == "uid", pids_cgroup="pids" in info.cgroups),
        hide=hide if isolated else [],
        private_mounts=isolated,
        scratch_mb=int(limits.scratch_mb),
        keep_visible=needed + [str(work)],
        expose=needed if (info.drop == "uid" and isolated) else [],
        drop=info.drop,
        uid=NOBODY_UID,
        gid=NOBODY_GID,
    )


# ---------------------------------------------------------------------------
# One child, spoken to over two pipes
# ---------------------------------------------------------------------------
class ChildSession:
    """A running child: commands go down one pipe, framed JSON results come up another.

    Every read is bounded in time (the caller's deadline, on the parent's
    monotonic clock) and in bytes (:data:`MAX_MESSAGE_BYTES` per message,
    :data:`MAX_CHANNEL_BYTES` per child). A malformed frame ends the session as
    if the child had crashed.
    """

    def __init__(self, work: Path, spec: ChildSpec, *, supervisor: Supervisor, info: SandboxInfo, limits: Limits,
                 sys_path: list[str], launch: int) -> None:
        self.supervisor, self.limits = supervisor, limits
        self.trusted = spec.mode == "reference"  # the solutions' run: its expected values are kept
        self.max_message = MAX_MESSAGE_BYTES[spec.mode]
        self.buffer = bytearray()
        self.received = 0
        self.eof = False
        self.broken: str | None = None
        result_r, result_w = os.pipe()
        command_r, command_w = os.pipe()
        request = child_request(work, spec, info=info, limits=limits, sys_path=sys_path, result_fd=result_w,
                                command_fd=command_r)
        spec_path = work / f"spec-{launch}.json"
        spec_path.write_text(request.to_json(), encoding="utf-8")
        os.chmod(spec_path, 0o644)
        self.owner = secrets.token_hex(8)  # unique among concurrent graders too (names the cgroup)
        self.cgroup = ChildCgroup.create(f"course-grade-{os.getpid()}-{self.owner}", limits) \
            if info.cgroups else None
        env = scrubbed_env(work, private_tmp=info.private_tmp)
        if self.cgroup is not None:
            env["COURSE_CGROUP"] = " ".join(self.cgroup.procs_files)
        self.out_path, self.err_path = work / f"stdout-{launch}.log", work / f"stderr-{launch}.log"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            os.chmod(self.out_path, 0o600)
            os.chmod(self.err_path, 0o600)
            try:
                self.proc = supervisor.spawn(_command(info.mode, spec_path, self.cgroup), owner=self.owner,
                                             cwd=str(work), env=env,
                                             stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                             pass_fds=(result_w, command_r))
            finally:
                os.close(result_w)
                os.close(command_r)
        self.started = time.monotonic()
        self.budget = MAX_CHANNEL_BYTES  # lowered by run_chapters to what the submission has left
        self._drained_for: float | None = None
        self.result_fd, self.command_fd = result_r, command_w
        os.set_blocking(self.result_fd, False)

    def send(self, command: str) -> bool:
        """Send one command line; ``False`` when the child no longer listens."""
        try:
            os.write(self.command_fd, (command + "\n").encode("ascii"))
            return True
        except OSError:
            return False

    def next_message(self, deadline: float) -> dict | None:
        """The next well-formed message before ``deadline``; ``None`` at the deadline, end of input or a bad frame.

        What already waits in the pipe at the deadline still counts (the parent
        may have been busy), what arrives later does not.
        """
        while True:
            message = self._take_frame()
            if message is not None or self.broken or self.eof:
                return message
            left = deadline - time.monotonic()
            if left <= 0:
                if self._drained_for == deadline:  # what was waiting at the deadline has been read
                    return None
                self._drained_for = deadline
                self._drain()
                continue
            ready, _, _ = select.select([self.result_fd], [], [], min(left, 0.5))
            if not ready:
                continue
            try:
                chunk = os.read(self.result_fd, 1 << 20)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                self.eof = True
                continue
            self.received += len(chunk)
            if self.received > self.budget:
                self.broken = f"the child sent more than {MAX_CHANNEL_BYTES >> 20} MiB of results"
                return None
            self.buffer += chunk

    def _drain(self, limit: int = 8 << 20) -> None:
        """Read what already waits in the pipe (at most ``limit`` bytes), without waiting for more."""
        taken = 0
        while taken < limit:
            try:
                chunk = os.read(self.result_fd, 1 << 20)
            except (BlockingIOError, OSError):
                return
            if not chunk:
                self.eof = True
                return
            taken += len(chunk)
            self.received += len(chunk)
            if self.received > self.budget:
                self.broken = f"the child sent more than {MAX_CHANNEL_BYTES >> 20} MiB of results"
                return
            self.buffer += chunk

    def _take_frame(self) -> dict | None:
        if len(self.buffer) < 8:
            return None
        size = int.from_bytes(self.buffer[:8], "big")
        if size > self.max_message:
            self.broken = f"a result message of {size} bytes (more than {self.max_message} allowed)"
            return None
        if len(self.buffer) < 8 + size:
            return None
        data = bytes(self.buffer[8:8 + size])
        del self.buffer[:8 + size]
        try:
            message = json.loads(data.decode("utf-8"))
        except (ValueError, RecursionError):
            self.broken = "a result message that is not JSON"
            return None
        if not isinstance(message, dict):
            self.broken = "a result message that is not a JSON object"
            return None
        return message

    def close(self) -> tuple[bool, int]:
        """Kill the child and everything it started.

        Returns:
            whether its cgroup saw an out-of-memory kill, and how many escaped
            processes the subreaper sweep killed (only possible without a PID namespace).
        """
        for fd in (self.command_fd, self.result_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.supervisor.kill_tree(self.proc, self.cgroup)
        self.supervisor.sweep()
        strays = self.supervisor.take_strays(self.owner)
        oom = False
        if self.cgroup is not None:
            oom = self.cgroup.oom_killed()
            self.cgroup.remove()
        return oom, strays

    def tail(self, n: int = 4000) -> str:
        return _tail(self.err_path, n)


def _tail(path: Path, n: int) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - n))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


# ---------------------------------------------------------------------------
# Probing the platform
# ---------------------------------------------------------------------------
def probe_sandbox(base: Path, supervisor: Supervisor, requested: str = "auto", allow_unsafe: bool = False,
                  single: bool = False) -> SandboxInfo:
    """Find the strongest sandbox that works here by starting a tiny child in it.

    Args:
        base: a private temporary folder for the probe's work folder.
        supervisor: the run's :class:`Supervisor`.
        requested: ``"auto"`` (strongest available), ``"namespaces"``, ``"userns"``, ``"nobody"`` or ``"unsafe"``.
        allow_unsafe: accept a sandbox that cannot protect the grades (``--unsafe-sandbox``).
        single: one submission in this run (``--single``): the ``"nobody"`` mode is then acceptable.

    Returns:
        the :class:`SandboxInfo` of the first configuration whose child could
        isolate itself, drop its privileges and still import numpy, torch and ``course_lib``.

    Raises:
        UnsafeSandboxError: only an unsafe configuration works and ``allow_unsafe`` is false.
        RuntimeError: ``requested`` does not work here, or no child can start at all.
        ValueError: unknown ``requested``.
    """
    if requested not in ("auto", "namespaces", "userns", "nobody", "unsafe"):
        raise ValueError(f"sandbox must be auto, namespaces, userns, nobody or unsafe; got {requested!r}")
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    has_unshare = sys.platform.startswith("linux") and shutil.which("unshare") is not None
    candidates: list[SandboxInfo] = []
    if has_unshare and root:
        candidates.append(SandboxInfo("namespaces", "uid", True, True, True, True))
    if has_unshare:
        candidates.append(SandboxInfo("userns", "caps", True, True, True, True))
    if root:
        candidates.append(SandboxInfo("nobody", "uid", False, False, False, False))
    candidates.append(SandboxInfo("unsafe", None, False, False, False, False))
    if requested != "auto":
        candidates = [c for c in candidates if c.mode == requested]
        if not candidates:
            raise RuntimeError(f"--sandbox {requested} is not possible here (root={root}, unshare={has_unshare})")
    sys_path = child_sys_path()
    failures, weakened = [], []  # weakened: the failures of modes this machine should allow (not --single's rule)
    for n, info in enumerate(candidates):
        if info.mode == "nobody" and not (single or allow_unsafe):
            failures.append("nobody: only for one submission per run (--single), since /tmp is shared")
            continue
        if info.mode == "unsafe" and not allow_unsafe:
            raise UnsafeSandboxError(
                "no sandbox that protects the grades works here (" + " | ".join(failures or ["no unshare"]) + "). "
                "Fix: run the grader as root on Linux with util-linux's unshare (or allow unprivileged user "
                "namespaces), and install the course and its Python where the user nobody can read them (e.g. a "
                "virtual environment under /opt, not under /root). To grade anyway without isolation, pass "
                "--unsafe-sandbox: student code then runs as your user, with your network and files.")
        info.subreaper = supervisor.subreaper
        probed = _probe_one(base / f"probe-{n}", info, supervisor, sys_path)
        if isinstance(probed, str):
            if info.drop == "uid" and not info.private_tmp and ("No module" in probed or "ermission" in probed):
                probed += (" - the user nobody cannot run this Python: install the course and its Python where "
                           "nobody can read them (e.g. a virtual environment under /opt, not under /root)")
            failures.append(f"{info.mode}: {probed}")
            weakened.append(f"{info.mode} failed: {probed}")
            continue
        if failures:
            info.notes.append("stronger sandboxes failed here: " + " | ".join(failures))
        info.weakened = weakened
        return info
    raise RuntimeError("no sandbox configuration could start the grading child:\n" + "\n".join(failures))


def _probe_one(work: Path, info: SandboxInfo, supervisor: Supervisor, sys_path: list[str]) -> str | None:
    """Run the probe child in ``info``'s configuration; fill in what it showed, or return why it failed."""
    work.parent.mkdir(parents=True, exist_ok=True)
    work = make_workdir(work.parent, work.name, info.drop)
    info.private_tmp = info.mode in ("namespaces", "userns")
    if info.mode != "unsafe":
        probe_cg = ChildCgroup.create(f"course-grade-probe-{os.getpid()}-{secrets.token_hex(8)}", Limits())
        if probe_cg is not None:
            info.cgroups = probe_cg.controllers
            probe_cg.remove()
    session = ChildSession(work, ChildSpec("probe"), supervisor=supervisor, info=info, limits=Limits(),
                           sys_path=sys_path, launch=0)
    try:
        message = session.next_message(time.monotonic() + 60)
    finally:
        session.close()
    report = message.get("probe") if isinstance(message, dict) else None
    if not isinstance(report, dict):
        return (session.tail(300).strip() or session.broken or "the probe child sent nothing")
    info.keyrings_denied = bool(report.get("keyrings_denied"))
    if not info.keyrings_denied:
        info.notes.append("could not install the seccomp filter that denies the kernel keyring calls")
    info.userns_denied = report.get("userns_denied") is True
    if not info.userns_denied:
        info.notes.append("the child can create a user namespace (the seccomp filter did not deny it)")
    info.locks_neutral = report.get("locks_neutral") is True
    if not info.locks_neutral:
        info.notes.append("file locks are not no-ops in the child (the seccomp filter did not take): a lock on a "
                          "file two children can read could pass data between them")
    info.watches_denied = report.get("watches_denied") is True
    if not info.watches_denied:
        info.notes.append("the child can watch files (inotify; the seccomp filter did not deny it)")
    if info.drop == "uid" and report.get("uid") == 0:
        return "the child is still root"
    if info.mode == "unsafe":
        info.notes.append("UNSAFE: the child runs as the grader's own user, with the host's network and files; "
                          "a student can read the solutions and forge grades")
        return None
    if info.mode == "nobody":
        info.notes.append("no namespaces here: the child (nobody) has the host's network, /tmp and IPC; "
                          "fine for one submission per container, not for a batch")
        return None
    if report.get("errors") or report.get("hidden_failed"):
        return "; ".join(report.get("errors", []) + report.get("hidden_failed", []))
    if "/tmp" not in report.get("scratch", []):
        return "no private /tmp"
    info.cgroups_hidden = report.get("cgroups_hidden") is True
    if not info.cgroups_hidden:
        info.notes.append("could not hide /sys/fs/cgroup: a child can read the cgroup files of the others")
    info.host_covered = not report.get("cover_failed")
    if not info.host_covered:
        info.notes.append("could not cover every top-level folder of the host: " + "; ".join(report["cover_failed"])[:500])
    info.read_only_host = not report.get("read_only_failed") and not report.get("writable")
    if not info.read_only_host:
        info.notes.append("could not make every host mount read-only for the child: "
                          + "; ".join(report.get("read_only_failed", []) + report.get("writable", []))[:500])
    if not info.cgroups:
        info.notes.append("no writable cgroup (cpu, pids, memory): per-child CPU quota and memory limit missing; "
                          "rlimits still apply")
    return None


# ---------------------------------------------------------------------------
# Running one submission's chapters
# ---------------------------------------------------------------------------
@dataclass
class ChildRun:
    """What the parent itself observed while a submission's children ran.

    Attributes:
        chapter_status: chapter -> ``"ok"`` (every case's result arrived in
            time), ``"timeout"`` (the parent's deadline passed), ``"crashed"``
            (the child died or broke the protocol first) or ``"memory"``.
        results: case id -> the child's message for it (untrusted data; only
            the first message per case, and only if it came in its chapter's time).
        ready: the child's ``ready`` message (versions; in the reference run, the cases).
        launches: children started (a new one after each crash/timeout).
        seconds: wall-clock seconds, all children together.
        output_cut: whether a stream hit its size cap (a flood).
        stderr_tail: the last characters of the children's stderr (untrusted).
        problems: what the parent saw go wrong (protocol errors), for the notes.
        killed_strays: escaped processes killed after a child ended.
        notebooks: chapter -> ``{"status": "ok" | "missing" | "unreadable", "problem": str, "notes": [str]}``
            as the child said it (untrusted text; one note per skipped code cell).
    """

    chapter_status: dict[str, str] = field(default_factory=dict)
    results: dict[str, dict] = field(default_factory=dict)
    ready: dict = field(default_factory=dict)
    launches: int = 0
    seconds: float = 0.0
    output_cut: bool = False
    stderr_tail: str = ""
    problems: list[str] = field(default_factory=list)
    killed_strays: int = 0
    notebooks: dict[str, dict] = field(default_factory=dict)


@dataclass(frozen=True)
class Unit:
    """Cases of one chapter that one command runs together (:func:`plan_units`).

    Attributes:
        chapter: the two-digit chapter.
        phase: 0 for cases that need no stand-in; ``k`` for cases whose stand-ins replace exercises of
            phases below ``k``.
        cases: the case ids, in the registry's order.
        standins: ``((function name, source), ...)``, sorted: the course's definitions put in place of the
            student's for these cases.
    """

    chapter: str
    phase: int
    cases: tuple[str, ...]
    standins: tuple[tuple[str, str], ...] = ()


class PlanError(ValueError):
    """Stand-ins that cannot be ordered (an exercise replaced by itself, or a cycle)."""


def plan_units(chapters: list[str], cases: list[dict]) -> list[Unit]:
    """The order in which a child runs the cases: phase by phase, chapter by chapter.

    ``cases``: manifest entries (``id``, ``chapter``, ``exercise``, ``function``, ``standins``). An
    exercise without stand-ins is in phase 0; one whose cases run with the course's definition of other
    exercises' functions is in phase ``1 + `` the highest phase of those exercises. The parent sends a
    unit only after every unit of a lower phase is closed (its ``done`` arrived, its deadline passed or
    its child was killed), and accepts results only for the cases of the unit being run - so the child
    never holds a stand-in for an exercise it can still be graded on.

    Raises:
        PlanError: an exercise's stand-ins replace itself, directly or through others.
    """
    order = {ch: i for i, ch in enumerate(chapters)}
    wanted = [c for c in cases if isinstance(c, dict) and c.get("chapter") in order]
    exercise_of = {c["function"]: c["exercise"] for c in wanted if isinstance(c.get("function"), str)}
    names: dict[str, set[str]] = {}
    for c in wanted:
        names.setdefault(c["exercise"], set()).update((c.get("standins") or {}).keys())
    phases: dict[str, int] = {}

    def phase_of(exercise: str, path: tuple[str, ...] = ()) -> int:
        if exercise in phases:
            return phases[exercise]
        if exercise in path:
            raise PlanError(f"the stand-ins of exercise {exercise} replace it (through {' -> '.join(path)})")
        below = [phase_of(exercise_of[n], path + (exercise,)) if n in exercise_of else 0
                 for n in names.get(exercise, ())]
        phases[exercise] = 1 + max(below) if below else 0
        return phases[exercise]

    units: dict[tuple, list[str]] = {}
    for c in wanted:
        standins = tuple(sorted((str(k), str(v)) for k, v in (c.get("standins") or {}).items()))
        if any(exercise_of.get(name) == c["exercise"] for name, _ in standins):
            raise PlanError(f"case {c['id']}: its stand-ins replace its own exercise {c['exercise']}")
        units.setdefault((phase_of(c["exercise"]), order[c["chapter"]], c["chapter"], standins), []).append(c["id"])
    return [Unit(chapter, phase, tuple(ids), standins)
            for (phase, _i, chapter, standins), ids in sorted(units.items(), key=lambda kv: kv[0][:2])]


def _run_unit(session: ChildSession, number: int, unit: Unit, run: ChildRun, deadline: float) -> str:
    """Send one unit's command and collect its results until its ``done`` or the deadline; return its status.

    Only the unit's own cases are accepted, each once: a result for a case of an earlier unit (say, sent
    once the child holds a stand-in for it) does not count.
    """
    if not session.send(PROTOCOL.run_command(unit.chapter, number, list(unit.cases), dict(unit.standins))):
        return "crashed"
    case_ids = set(unit.cases)
    while True:
        message = session.next_message(deadline)
        if message is None:
            if session.broken:
                run.problems.append(session.broken)
                return "crashed"
            return "crashed" if session.eof else "timeout"
        if message.get("done") == unit.chapter and message.get("unit") == number:
            return "ok"
        if "notebook" in message and message.get("notebook") == unit.chapter:
            if unit.chapter not in run.notebooks:  # the first unit of the chapter says it
                run.notebooks[unit.chapter] = _notebook_fields(message)
            continue
        case_id = message.get("case")
        if isinstance(case_id, str) and case_id in case_ids and case_id not in run.results:
            run.results[case_id] = _kept_fields(message, reference=session.trusted)


def _notebook_fields(message: dict) -> dict:
    """What the parent keeps of a ``notebook`` message (untrusted text, capped)."""
    status = message.get("status") if message.get("status") in PROTOCOL.NOTEBOOK_STATUSES else "ok"
    problem = message.get("problem") if isinstance(message.get("problem"), str) else ""
    notes = message.get("notes") if isinstance(message.get("notes"), list) else []
    return {"status": status, "problem": problem[:MAX_ERROR_CHARS],
            "notes": [n[:MAX_ERROR_CHARS] for n in notes[:20] if isinstance(n, str)]}


def _kept_fields(message: dict, *, reference: bool = False) -> dict:
    """Only what the parent uses of a case message: ``arrays`` (str -> str) and ``error`` (capped text).

    ``expected`` and ``inputs`` are kept from the trusted reference run only (``reference=True``).
    """
    kept: dict = {"arrays": {}, "error": None}
    arrays = message.get("arrays")
    if isinstance(arrays, dict):
        kept["arrays"] = {k: v for k, v in list(arrays.items())[:200] if isinstance(k, str) and isinstance(v, str)}
    error = message.get("error")
    if isinstance(error, str):
        kept["error"] = error[:MAX_ERROR_CHARS]
    for key in ("expected", "inputs") if reference else ():  # the trusted reference run only
        if isinstance(message.get(key), dict):
            kept[key] = {k: v for k, v in message[key].items() if isinstance(k, str) and isinstance(v, str)}
    return kept


_STATUS_RANK = {"ok": 0, "timeout": 3, "memory": 2, "crashed": 1}


def run_chapters(work: Path, spec: ChildSpec, *, supervisor: Supervisor, info: SandboxInfo, limits: Limits,
                 sys_path: list[str], chapters: list[str], case_ids: dict[str, set[str]],
                 cases: list[dict] | None = None) -> ChildRun:
    """Run ``chapters`` of the submission in ``work``; return what the parent saw.

    The cases run unit by unit (:func:`plan_units`: phase 0, the cases that need no stand-in, chapter by
    chapter; then the cases that run with the course's definition of another exercise's function), each
    unit on the parent's clock (``chapter_timeout_s`` each). If the child dies or overruns, that unit's
    chapter is marked and a new child runs the units not yet started, until all are done or the
    submission's time is spent. ``cases``: the manifest's case entries (in the reference run, taken from
    the trusted child's ``ready`` message when ``None``); ``case_ids`` maps each chapter to the ids whose
    results the parent accepts for it (in the reference run, filled from ``ready`` when empty).
    """
    run = ChildRun()
    start = time.monotonic()
    sub_deadline = start + limits.submission_timeout_s
    remaining: list[tuple[int, Unit]] | None = None
    received = 0  # bytes from all of this submission's children
    while (remaining is None or remaining) and time.monotonic() < sub_deadline:
        run.launches += 1
        session = ChildSession(work, spec, supervisor=supervisor, info=info, limits=limits, sys_path=sys_path,
                               launch=run.launches)
        session.budget = max(0, MAX_CHANNEL_BYTES - received)
        failed = None
        try:
            ready = session.next_message(min(sub_deadline, session.started + limits.startup_timeout_s))
            mismatch = protocol_problem(ready) if isinstance(ready, dict) and ready.get("ready") is True else ""
            if mismatch:
                run.problems.append(mismatch)
            if not isinstance(ready, dict) or ready.get("ready") is not True or mismatch:
                # the child never got going: another one would not either
                status = "timeout" if time.monotonic() >= sub_deadline else "crashed"
                for _number, unit in remaining or []:
                    _mark(run, unit.chapter, status)
                for ch in chapters:
                    run.chapter_status.setdefault(ch, status)
                remaining, failed = [], None
            else:
                run.ready = run.ready or ready
                _learn_case_ids(ready, case_ids)
                if remaining is None:
                    remaining = list(enumerate(_plan(chapters, case_ids, cases, ready, session.trusted)))
                while remaining:
                    number, unit = remaining.pop(0)
                    deadline = min(sub_deadline, time.monotonic() + limits.chapter_timeout_s)
                    status = _run_unit(session, number, unit, run, deadline)
                    _mark(run, unit.chapter, status)
                    if status != "ok":
                        failed = unit.chapter
                        break
        finally:
            oom, strays = session.close()
            received += session.received
            run.killed_strays += strays
            err_tail = session.tail()
            run.stderr_tail = (run.stderr_tail + err_tail)[-4000:]
            run.output_cut = run.output_cut or _flooded(session, limits)
        # out of memory only from what the parent sees (the cgroup's counters), never the child's stderr words
        if failed and run.chapter_status[failed] == "crashed" and oom:
            run.chapter_status[failed] = "memory"
    for _number, unit in remaining or []:
        _mark(run, unit.chapter, "timeout")
    for ch in chapters:
        run.chapter_status.setdefault(ch, "timeout" if remaining is None else "ok")
    run.seconds = time.monotonic() - start
    return run


def _mark(run: ChildRun, chapter: str, status: str) -> None:
    """A chapter's status is its worst unit's."""
    old = run.chapter_status.get(chapter)
    if old is None or _STATUS_RANK.get(status, 1) > _STATUS_RANK.get(old, 1):
        run.chapter_status[chapter] = status


def _plan(chapters: list[str], case_ids: dict[str, set[str]], cases: list[dict] | None, ready: dict,
          trusted: bool) -> list[Unit]:
    """The units to run: from ``cases`` (the manifest), or in the trusted reference run from ``ready``."""
    if cases is None:
        cases = [c for c in ready.get("cases", []) if isinstance(c, dict)] if trusted else []
    known = {cid for ids in case_ids.values() for cid in ids}
    entries = [c for c in cases if c.get("id") in known]
    planned = {cid for c in entries for cid in [c["id"]]}
    units = plan_units(chapters, entries)
    for ch in chapters:  # ids without a manifest entry (e.g. a test's own case_ids): phase 0, no stand-in
        extra = sorted(i for i in case_ids.get(ch, set()) if i not in planned)
        if extra:
            units.insert(0, Unit(ch, 0, tuple(extra)))
    return units


def _learn_case_ids(ready: dict, case_ids: dict[str, set[str]]) -> None:
    """In the reference run the parent learns the case ids from the trusted child's ``ready`` message."""
    if any(case_ids.values()) or not isinstance(ready.get("cases"), list):
        return
    for c in ready["cases"]:
        if isinstance(c, dict) and isinstance(c.get("id"), str):
            case_ids.setdefault(str(c.get("chapter")), set()).add(c["id"])


def _flooded(session: ChildSession, limits: Limits) -> bool:
    """Whether a stream of the child hit its size cap."""
    paths = (session.out_path, session.err_path)
    sizes = [p.stat().st_size for p in paths if p.exists()]
    return any(s >= (limits.file_mb << 20) for s in sizes) or any("output cut here" in _tail(p, 300) for p in paths)


def remove_tree(path: Path) -> None:
    """Remove a folder tree of any depth, also folders made unreadable (never recursive, no subprocess:
    the supervisor's sweep kills child processes it did not start)."""
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.exists():
        _remove_iteratively(path)


def _remove_iteratively(path: Path) -> None:
    """Depth-first removal holding one folder descriptor at a time (no recursion, no path length limit).

    Descends with ``openat`` (never following a symbolic link), makes each
    folder writable and listable on the way, and climbs back with ``..``.
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        os.chmod(path, 0o700)
        fd = os.open(path, flags)
    except OSError:
        return
    names: list[str] = []  # the folders below ``path`` that ``fd`` is in
    while True:
        subdir = None
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        subdir = subdir or entry.name
                    else:
                        try:
                            os.unlink(entry.name, dir_fd=fd)
                        except OSError:
                            pass
        except OSError:
            pass
        if subdir is not None:
            try:
                os.chmod(subdir, 0o700, dir_fd=fd)
                child = os.open(subdir, flags, dir_fd=fd)
            except OSError:
                child = None
            if child is not None:
                os.close(fd)
                fd = child
                names.append(subdir)
                continue
            try:  # a folder that cannot be opened: try to remove it as it is, then give up on it
                os.rmdir(subdir, dir_fd=fd)
                continue
            except OSError:
                pass
        if not names:
            os.close(fd)
            try:
                os.rmdir(path)
            except OSError:
                pass
            return
        parent = os.open("..", flags, dir_fd=fd)
        os.close(fd)
        fd = parent
        try:
            os.rmdir(names.pop(), dir_fd=fd)
        except OSError:
            os.close(fd)  # it cannot be emptied: stop rather than loop
            return

"""The grader's child: runs exercise cases on one folder of notebooks and sends back numbers.

This file is run by the grader as a *script*, never imported by the parent::

    python -I -S -B .../course_grader/child.py spec-N.json

``-I`` (isolated: no current directory or script directory on ``sys.path``, no
``PYTHON*`` variables, no user site), ``-S`` (no ``site``: no ``.pth`` file
runs) and ``-B`` (no ``.pyc`` written). The only import paths are the ones the
parent lists in the spec, so a student's ``torch.py`` can never shadow a module.

Threat model: once a student's notebook is loaded, the student's code controls
this whole process. So this process holds nothing worth stealing - no expected
value and no reference code: the cases file it loads is the *student copy* made
by :mod:`course_exercises.casefile` (every ``expected`` removed), and the
random inputs of each case arrive as data (``inputs-NN.npz``, drawn by the
trusted reference run from a salt this process never sees). Whatever it sends
back is compared by the parent with the reference for exactly those inputs:
forging a result means solving the exercise.

What the child does, in order:

1. reads its request (a :class:`~course_grader.protocol.ChildRequest`
   written by the parent, refused when of another protocol version) and
   changes into the work folder;
2. as root of fresh namespaces: covers the solutions, the output folder, the
   other submissions ... with empty read-only tmpfs mounts (``spec.hide``),
   covers every top-level folder outside the system's (``/home``, ``/opt``,
   ``/var``, ``/work`` ...) except the paths it needs (:func:`_cover_host`),
   covers the terminals and the cgroup files (:func:`_no_cgroups`), mounts
   one size-capped tmpfs on ``/tmp`` and binds parts of it over
   ``/var/tmp``, ``/dev/shm`` and ``/run/lock`` (the only writable places),
   makes the needed paths below closed folders reachable (:func:`_expose`),
   then remounts every other mount read-only;
3. sets its resource limits (soft = hard), drops its privileges (to
   *nobody*, or every capability inside a user namespace; ``no_new_privs``)
   and installs its seccomp filter (no keyrings, no new user namespace);
4. loads the cases, sends ``{"ready": ...}`` on the result channel and waits
   for commands on the command channel: each runs one *unit* of a chapter
   (:func:`~course_grader.protocol.run_command`: the case ids, and the
   course's stand-ins for the functions of other exercises that these cases
   call) - loads the notebook afresh (a cell that does not parse, or whose
   definitions raise, is skipped), sends ``{"notebook": NN, "status": ...,
   "notes": [...]}``, puts the stand-ins in place, sends
   ``{"case": id, "arrays": ..., "error": ...}`` per case and
   ``{"done": "NN", "unit": n}`` at the end; ``exit`` (or end of input) ends it.

The clock is the parent's: it starts a chapter's time when it sends the
command and accepts only results that reach it before the chapter's deadline.

In the *reference* run (the course's ``solutions/``, trusted), the child also
gets a secret salt: it draws each case's inputs from it (redrawing until the
case's ``robust()`` holds and the solution agrees with ``expected()``), and
sends the inputs, the solution's arrays and the expected arrays.

Design and threat model: ``course_grader/SECURITY.md``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import sys
import time

__all__ = ["main", "isolate", "deny_keyrings", "as_plain_arrays", "Channel", "MAX_DRAWS", "MAX_RESULT_BYTES",
           "SHARED_WRITABLE", "SYSTEM_FOLDERS"]

#: redraws of one case's inputs before the reference run gives up on it
# Redraws per case in the reference run until robust() holds and the solution matches. The rarest case (10.2's
# limited beam with min_length 3, which must differ from greedy and from a never-freezing beam) keeps about 4% of
# its draws (17 of 400 measured): 200 redraws ran out now and then (0.96**200 = 3e-4 per reference run; seen in a
# test run) and stopped the grading; with 2,000 the chance is about 1e-35. A draw costs about a millisecond.
MAX_DRAWS = 2000
#: the largest result array sent for one key (the cases' answers are a few KiB)
MAX_RESULT_BYTES = 512 << 10
#: :mod:`course_grader.protocol`, loaded by path from beside this file by :func:`main` (before any
#: import path is set up): the request's fields and the messages' shapes
PROTOCOL = None

# ---------------------------------------------------------------------------
# Privileged set-up (runs before any course or student code is imported)
# ---------------------------------------------------------------------------
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MNT_DETACH = 32, 4096, 16384, 2
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME = 1024, 2048, 1 << 21
_PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP = 38, 24
#: statvfs flag -> mount flag, for the locked flags a remount must keep
_KEEP_FLAGS = ((2, _MS_NOSUID), (4, _MS_NODEV), (8, _MS_NOEXEC), (1024, _MS_NOATIME), (2048, _MS_NODIRATIME),
               (4096, _MS_RELATIME))
#: host places everyone may write to; each becomes a part of the private scratch tmpfs
SHARED_WRITABLE = ("/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _mount(libc, source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    rc = libc.mount(os.fsencode(source), os.fsencode(target), fstype.encode() if fstype else None, flags,
                    data.encode() if data else None)
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} -> {target}: {os.strerror(err)}")


def _expose(paths: list[str], uid: int, stage_root: str | None = None) -> None:
    """Make each path reachable by ``uid`` inside this (private) mount namespace.

    An ancestor that ``uid`` cannot traverse (e.g. ``/root``, mode 0700, when
    Python lives in ``/root/.pyenv``) is covered with an empty tmpfs of mode
    0711 into which only the needed child directories are bind-mounted back
    (every one that some path needs: ``/root/.pyenv`` and ``/root/.cache`` for
    a virtual environment under ``~/.cache``): the rest of that directory stays
    invisible to the child. Ancestors are handled from the top down, so a
    bound-back folder that is itself closed (``~/.cache``, mode 0700) is
    covered in turn. (``stage_root`` is no longer used: the folders are held open while covered.)
    """
    split = sorted({tuple(os.path.realpath(p).split("/")) for p in paths})
    depth = 1
    while True:
        ancestors = sorted({parts[:depth + 1] for parts in split if len(parts) - 1 > depth})
        if not ancestors:
            return
        for ancestor in ancestors:
            st = os.stat("/".join(ancestor))
            if st.st_mode & 0o001 or st.st_uid == uid:
                continue
            below = sorted({"/".join(parts[:depth + 2]) for parts in split
                            if parts[:depth + 1] == ancestor and len(parts) - 1 > depth})
            _cover_but("/".join(ancestor), below)
        depth += 1


def _cover_but(folder: str, keep: list[str]) -> None:
    """Cover ``folder`` with an empty tmpfs (mode 0711) and bind each of ``keep`` (its entries) back.

    Each entry is held open (``O_PATH``) across the cover and bound back from its descriptor, so no staging
    folder is needed (one could lie under ``folder`` itself).
    """
    libc = _libc()
    held = [(entry, os.path.isdir(entry), os.open(entry, os.O_PATH)) for entry in keep]
    try:
        _mount(libc, "none", folder, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=64k,mode=0711")
        for entry, is_dir, fd in held:
            if is_dir:
                os.mkdir(entry, 0o755)
            else:  # a file (a zip on the import paths) is bound onto a file
                open(entry, "x").close()
            _mount(libc, f"/proc/self/fd/{fd}", entry, None, _MS_BIND | _MS_REC, None)
    finally:
        for _entry, _is_dir, fd in held:
            os.close(fd)


def _hide(paths: list[str]) -> list[str]:
    """Mount an empty read-only tmpfs over each folder and bind ``/dev/null`` over each file (it reads as
    empty); return the ones that failed."""
    libc = _libc()
    failed = []
    for path in paths:
        try:
            if os.path.isdir(path):
                _mount(libc, "none", path, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
                       "size=4k,mode=000")
            elif os.path.isfile(path):
                _mount(libc, "/dev/null", path, None, _MS_BIND, None)
        except OSError as exc:
            failed.append(f"{path}: {exc}")
    return failed


#: top-level folders of the system that the child keeps seeing (read-only); every other one is covered
SYSTEM_FOLDERS = frozenset({"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "dev", "proc", "sys",
                            "tmp"})


def _cover_host(keep: list[str]) -> list[str]:
    """Cover every other top-level folder (``/home``, ``/opt``, ``/srv``, ``/var``, ``/work`` ...) with an
    empty tmpfs, binding back only the folders in ``keep`` (the interpreter, the imports, the work folder):
    old reports, other checkouts and other people's files stay out of sight. Returns what failed.
    """
    libc = _libc()
    real = sorted({os.path.realpath(k) for k in keep})
    outer = [k for k in real if not any(k != o and k.startswith(o.rstrip("/") + "/") for o in real)]
    failed = []
    for name in sorted(os.listdir("/")):
        top = "/" + name
        if name in SYSTEM_FOLDERS or os.path.islink(top) or not os.path.isdir(top):
            continue
        inside = [k for k in outer if k.startswith(top + "/") or k == top]
        if top in inside:
            continue
        fds = []
        try:
            fds = [(k, os.open(k, os.O_PATH | os.O_DIRECTORY)) for k in inside]
            _mount(libc, "none", top, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=64k,mode=0755")
            for k, fd in fds:
                os.makedirs(k, mode=0o755, exist_ok=True)
                _mount(libc, f"/proc/self/fd/{fd}", k, None, _MS_BIND | _MS_REC, None)
        except OSError as exc:
            failed.append(f"{top}: {exc}")
        finally:
            for _k, fd in fds:
                os.close(fd)
    return failed


def _no_terminals() -> list[str]:
    """Cover ``/dev/pts`` and ``/dev/ptmx``: the host's terminals (one devpts for everybody) would be a
    channel between two children graded at the same time. Returns what failed."""
    libc, failed = _libc(), []
    for target, how in (("/dev/pts", "tmpfs"), ("/dev/ptmx", "bind")):
        if not os.path.exists(target):
            continue
        try:
            if how == "tmpfs":
                _mount(libc, "none", target, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
                       "size=4k,mode=000")
            else:
                _mount(libc, "/dev/null", target, None, _MS_BIND, None)
        except OSError as exc:
            failed.append(str(exc))
    return failed


def _no_cgroups() -> bool:
    """Cover ``/sys/fs/cgroup`` with an empty read-only tmpfs: the host's cgroup tree (every other child's
    ``memory.usage_in_bytes``, ``cgroup.procs`` ...) would be a channel between two children graded at the
    same time. The child stays in its own cgroup and under its limits: only the files go out of sight.
    Returns whether the tree is now empty for the child."""
    target = "/sys/fs/cgroup"
    if not os.path.isdir(target):
        return True
    with contextlib.suppress(OSError):
        _mount(_libc(), "none", target, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
               "size=4k,mode=000")
    try:
        return os.listdir(target) == []
    except OSError:
        return False


def _keep_visible(paths: list[str]) -> list[int]:
    """Open each folder (``O_PATH``) so that it can be bound back after ``/tmp`` is covered."""
    fds = []
    for path in paths:
        real = os.path.realpath(path)
        if real == "/tmp" or not real.startswith(("/tmp/", *(p + "/" for p in SHARED_WRITABLE))):
            continue
        try:
            fds.append((real, os.open(real, os.O_PATH | os.O_DIRECTORY)))
        except OSError:
            pass
    return fds


def _bind_back(kept) -> None:
    """Bind the folders of :func:`_keep_visible` back to their paths, inside the new scratch."""
    libc = _libc()
    for real, fd in kept:
        os.makedirs(real, mode=0o755, exist_ok=True)
        _mount(libc, f"/proc/self/fd/{fd}", real, None, _MS_BIND | _MS_REC, None)
        os.close(fd)


def _private_scratch(size_mb: int, owner: tuple[int, int] | None) -> list[str]:
    """One tmpfs of ``size_mb`` on ``/tmp``; its sub-folders cover the other shared writable places.

    The tmpfs lives in this mount namespace only: it vanishes with the child's
    last process, whatever tree a student built in it. Returns the mount
    points now backed by the scratch.
    """
    libc = _libc()
    _mount(libc, "none", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={int(size_mb)}m,mode=1777")
    covered = ["/tmp"]
    for place in SHARED_WRITABLE:
        if not os.path.isdir(place):
            continue
        sub = "/tmp/.private" + place.replace("/", "-")
        os.mkdir(sub, 0o1777)
        os.chmod(sub, 0o1777)
        _mount(libc, sub, place, None, _MS_BIND, None)
        covered.append(place)
    home = "/tmp/home"
    os.mkdir(home, 0o700)
    if owner is not None:
        os.chown(home, *owner)
    return covered


def _mount_points() -> list[str]:
    """Mount points of this mount namespace (``/proc/self/mountinfo``), outermost first."""
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
        for line in fh:
            fields = line.split()
            if len(fields) > 4:
                points.append(fields[4].encode().decode("unicode_escape", errors="replace"))
    return points


def _package_writable(read_only_failed: list[str]) -> list[str]:
    """The failed read-only remounts (``"point: reason"``) whose mount holds the course package."""
    package = os.path.dirname(os.path.abspath(__file__))
    found = []
    for entry in read_only_failed:
        point = entry.rsplit(": ", 1)[0].rstrip("/") or "/"
        if point == "/" or package == point or package.startswith(point + "/"):
            found.append(f"the course package's mount stayed writable ({entry})")
    return found


def _read_only_elsewhere(writable: list[str]) -> list[str]:
    """Remount every mount read-only except ``writable`` ones and the kernel's ``/proc``, ``/sys``, ``/dev/pts``.

    Returns the mount points that could not be remounted (reported by the probe).
    """
    libc = _libc()
    failed = []
    skip_under = ("/proc", "/sys", "/dev/pts")
    for point in _mount_points():
        if point in writable or any(point == s or point.startswith(s + "/") for s in skip_under):
            continue
        try:
            flags = os.statvfs(point).f_flag
        except OSError:
            continue
        if flags & 1:  # ST_RDONLY already
            continue
        keep = 0
        for st_flag, ms_flag in _KEEP_FLAGS:
            if flags & st_flag:
                keep |= ms_flag
        rc = libc.mount(None, os.fsencode(point), None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | keep, None)
        if rc != 0:
            failed.append(f"{point}: {os.strerror(ctypes.get_errno())}")
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
        _soft, hard = resource.getrlimit(which)
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


def _drop_privileges(spec) -> None:
    drop = spec.drop
    if drop == "uid":
        os.setgroups([])
        os.setgid(int(spec.gid))
        os.setuid(int(spec.uid))
        if os.getuid() == 0 or os.geteuid() == 0:  # pragma: no cover - defensive
            raise RuntimeError("could not drop root")
    elif drop == "caps":
        _drop_capabilities()
    if sys.platform.startswith("linux"):
        _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


#: audit arch -> syscall numbers of add_key, request_key, keyctl (kernel keyrings are not namespaced:
#: without this filter they are a channel between students and outlive the child)
_KEYRING_SYSCALLS = {0xC000003E: (248, 249, 250), 0xC00000B7: (217, 218, 219)}
#: audit arch -> (unshare, clone, clone3): a new user namespace would give the child every capability
#: inside it, and with them far more of the kernel (mounts, more namespaces)
_NAMESPACE_SYSCALLS = {0xC000003E: (272, 56, 435), 0xC00000B7: (97, 220, 435)}
#: audit arch -> inotify_init, inotify_init1, inotify_add_watch, fanotify_init (aarch64 has no inotify_init):
#: a watch on a file every child can read (IN_OPEN, IN_ACCESS) sees a sibling open or read it - a channel
_WATCH_SYSCALLS = {0xC000003E: (253, 294, 254, 300), 0xC00000B7: (26, 27, 262)}
#: audit arch -> (flock, fcntl): a lock on a file every child can open (read-only is enough) is seen by a
#: sibling that tries the same lock - a channel
_LOCK_SYSCALLS = {0xC000003E: (73, 72), 0xC00000B7: (32, 25)}
#: fcntl commands that take a lock (F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW): a no-op that succeeds
_FCNTL_SET_LOCKS = (6, 7, 37, 38)
#: fcntl commands that would tell about others' locks or accesses (F_GETLK, F_OFD_GETLK, F_SETLEASE,
#: F_NOTIFY - dnotify's DN_ACCESS sees a sibling read a file of a shared folder): fail with EINVAL
_FCNTL_DENIED = (5, 36, 1024, 1026)
_CLONE_NEWUSER = 0x10000000
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_RET_ALLOW, _RET_EPERM, _RET_ENOSYS = 0x7FFF0000, 0x00050001, 0x00050026
#: SECCOMP_RET_ERRNO with errno 0: the call is not run and returns 0 (a lock "taken" without taking it)
_RET_NOOP, _RET_EINVAL = 0x00050000, 0x00050016
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
#: offsets in ``struct seccomp_data``: the call's number, the architecture, the low half of the first and
#: of the second argument (fcntl's command: the kernel reads it as an unsigned int, the low half)
_NR, _ARCH, _ARG0, _ARG1 = 0, 4, 16, 24


def seccomp_program(arch: int) -> list[tuple[int, int, int, int]]:
    """The filter of :func:`deny_keyrings` for one architecture, as ``(code, jt, jf, k)`` BPF instructions.

    Fails with EPERM: a foreign architecture's call (x32 included), the keyring calls, and ``unshare`` or
    ``clone`` with ``CLONE_NEWUSER`` in their flags. ``clone3`` passes its flags in memory a filter cannot
    read, so it fails with ENOSYS: the C library then falls back to ``clone``, whose flags are checked.
    The file watches (``inotify_init``, ``inotify_init1``, ``inotify_add_watch``, ``fanotify_init``) fail with
    ENOSYS. File locks are no-ops: ``flock`` and the ``fcntl`` lock commands (``F_SETLK``, ``F_SETLKW``,
    ``F_OFD_SETLK``, ``F_OFD_SETLKW``; the command is ``fcntl``'s second argument) return 0 without locking
    anything, so code that locks its own files (sqlite, caches) still runs, and no sibling can see a lock;
    ``F_GETLK``, ``F_OFD_GETLK``, ``F_SETLEASE`` and ``F_NOTIFY`` fail with EINVAL.
    """
    keyrings = _KEYRING_SYSCALLS[arch]
    unshare, clone, clone3 = _NAMESPACE_SYSCALLS[arch]
    flock, fcntl = _LOCK_SYSCALLS[arch]
    # (code, label if true, label if false, k); a label is the name of a "ret" below, None the next line
    lines = [(_LD_ABS, None, None, _ARCH), (_JEQ, None, "eperm", arch),
             (_LD_ABS, None, None, _NR), (_JGE, "eperm", None, 0x40000000)]
    lines += [(_JEQ, "eperm", None, nr) for nr in keyrings]
    lines += [(_JEQ, "enosys", None, nr) for nr in _WATCH_SYSCALLS[arch]]
    lines += [(_JEQ, "noop", None, flock), (_JEQ, "fcntl", None, fcntl)]
    lines += [(_JEQ, "enosys", None, clone3), (_JEQ, "flags", None, unshare), (_JEQ, "flags", None, clone),
              (_RET, None, None, _RET_ALLOW)]
    labels = {"flags": len(lines)}
    lines += [(_LD_ABS, None, None, _ARG0), (_JSET, "eperm", None, _CLONE_NEWUSER), (_RET, None, None, _RET_ALLOW)]
    labels["fcntl"] = len(lines)
    lines += [(_LD_ABS, None, None, _ARG1)]
    lines += [(_JEQ, "noop", None, cmd) for cmd in _FCNTL_SET_LOCKS]
    lines += [(_JEQ, "einval", None, cmd) for cmd in _FCNTL_DENIED]
    lines += [(_RET, None, None, _RET_ALLOW)]
    for name, ret in (("enosys", _RET_ENOSYS), ("eperm", _RET_EPERM), ("noop", _RET_NOOP), ("einval", _RET_EINVAL)):
        labels[name] = len(lines)
        lines.append((_RET, None, None, ret))
    # a jump offset counts the instructions skipped after the jump
    return [(code, labels[t] - i - 1 if t else 0, labels[f] - i - 1 if f else 0, k)
            for i, (code, t, f, k) in enumerate(lines)]


def deny_keyrings() -> bool:
    """Install the seccomp filter of :func:`seccomp_program`: no kernel keyring, no new user namespace, no file
    watch, no file lock a sibling could see.

    Needs ``no_new_privs`` (set by :func:`_drop_privileges`). Returns whether the filter is in place.
    """
    import platform

    arch = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}.get(platform.machine())
    if arch is None or not sys.platform.startswith("linux"):
        return False

    class _Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]

    program = seccomp_program(arch)
    filters = (_Filter * len(program))(*[_Filter(*f) for f in program])
    prog = _Prog(len(program), ctypes.cast(filters, ctypes.POINTER(_Filter)))
    return _libc().prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) == 0


def isolate(spec) -> dict:
    """Steps 2 and 3 of the module docstring for ``spec`` (a :class:`~course_grader.protocol.ChildRequest`);
    returns what was done (for the probe's report)."""
    report: dict = {"hidden_failed": [], "cover_failed": [], "scratch": [], "read_only_failed": [], "errors": []}
    if spec.hide:
        report["hidden_failed"] = _hide(spec.hide)
    report["cgroups_hidden"] = False
    if spec.private_mounts:
        report["cover_failed"] = _cover_host(list(spec.keep_visible)) + _no_terminals()
        report["cgroups_hidden"] = _no_cgroups()
        try:
            kept = _keep_visible(list(spec.keep_visible))
            owner = (int(spec.uid), int(spec.gid)) if spec.drop == "uid" else None
            report["scratch"] = _private_scratch(int(spec.scratch_mb), owner)
            _bind_back(kept)
            if spec.expose:  # after the covers and the scratch: the folders they made are open already
                _expose(spec.expose, int(spec.uid), spec.stage_dir)
            report["read_only_failed"] = _read_only_elsewhere(report["scratch"])
        except OSError as exc:
            report["errors"].append(str(exc))
    _set_limits(spec.limits)
    _drop_privileges(spec)
    report["keyrings_denied"] = deny_keyrings()
    return report


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
        return len(text)

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
# The two channels
# ---------------------------------------------------------------------------
class Channel:
    """Framed messages to the parent: 8 bytes of length (big-endian), then UTF-8 JSON."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, message: dict) -> None:
        data = json.dumps(message).encode()
        data = len(data).to_bytes(8, "big") + data
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]


def _npy_text(value, np) -> str:
    import base64
    import io

    buf = io.BytesIO()
    np.save(buf, value, allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _arrays_text(arrays: dict, np) -> dict:
    return {key: _npy_text(value, np) for key, value in arrays.items()}


def _describe(exc: BaseException, limit: int = 2000) -> str:
    """The exception line plus the student's frames (``<extracted from ...>``)."""
    import linecache
    import traceback

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
        if type(exc).__name__ == "ReturnTypeError" and isinstance(exc, TypeError):  # the return-type rule: one line
            return str(exc)[:limit]
    except BaseException:  # a student exception whose __str__ raises
        text = type(exc).__name__
    return (text[:limit] + where)[: limit + 400]


def as_plain_arrays(produced, np) -> dict:
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


def _load_inputs(work: str, chapter: str, np) -> dict:
    """case id -> {input key -> array} from ``inputs-NN.json`` / ``inputs-NN.npz`` (written by the parent)."""
    try:
        with open(os.path.join(work, f"inputs-{chapter}.json"), encoding="utf-8") as fh:
            index = json.load(fh)
    except FileNotFoundError:
        return {}
    out: dict = {}
    with np.load(os.path.join(work, f"inputs-{chapter}.npz"), allow_pickle=False) as data:
        for case_id, keys in index.items():
            out[case_id] = {key: data[name] for key, name in keys.items()}
    return out


# ---------------------------------------------------------------------------
# Running cases
# ---------------------------------------------------------------------------
def _seed_everything(np) -> None:
    import random

    import torch

    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)


def _student_case(case, ns, inputs: dict, course, np) -> dict:
    """Run one case on the student's namespace with the given inputs; the message to send."""
    _seed_everything(np)
    start = time.perf_counter()
    try:
        with course.drawing(course.Draws(replay=inputs)):
            arrays = as_plain_arrays(case.produce(ns), np)
        big = [f"`{k}` has shape {tuple(v.shape)}" for k, v in arrays.items() if v.nbytes > MAX_RESULT_BYTES]
        if big:  # an honest mistake (a wrong broadcast) stays one readable message, not a protocol error
            raise ValueError(f"{'; '.join(big)}: far more values than this case can need")
        message = PROTOCOL.case_message(case.id, _arrays_text(arrays, np))
    except BaseException as exc:  # noqa: BLE001 - every failure is the student's
        message = PROTOCOL.case_message(case.id, error=_describe(exc))
    message["seconds"] = round(time.perf_counter() - start, 4)
    return message


def _reference_case(case, ns, salt: str, course, np) -> dict:
    """Draw inputs from the salt until the case is robust and the solution matches ``expected()``."""
    problem = "no draw kept clear of ties"
    for attempt in range(MAX_DRAWS):
        draws = course.Draws(salt=f"{salt}|{case.id}|{attempt}")
        _seed_everything(np)
        try:
            with course.drawing(draws):
                if getattr(case, "robust", None) is not None and not case.robust():
                    continue
                expected = as_plain_arrays(case.expected(), np)
                got = as_plain_arrays(case.produce(ns), np)
        except BaseException as exc:  # noqa: BLE001
            return PROTOCOL.case_message(case.id, error=_describe(exc))
        problem = course.compare(case, got, expected)
        if problem is None:
            return PROTOCOL.case_message(case.id, _arrays_text(got, np), expected=_arrays_text(expected, np),
                                         inputs=_arrays_text(draws.recorded, np), draws=attempt + 1)
        if not draws.recorded:  # fixed inputs: another draw gives the same answer
            break
    return PROTOCOL.case_message(case.id, error=f"the solutions disagree with expected(): {problem}")


def _case_meta(case) -> dict:
    """A case's manifest entry (reference run only: ``standins`` are the course's sources)."""
    return {"id": case.id, "chapter": case.chapter, "exercise": case.exercise,
            "function": getattr(case, "function", None) or (case.requires[0] if case.requires else case.exercise),
            "points": case.points, "requires": list(case.requires), "rtol": case.rtol, "atol": case.atol,
            "hint": case.hint, "standins": dict(getattr(case, "standins", None) or {})}


def _run_unit(command: dict, spec, work: str, cases: list, notebooks: dict, course, channel: Channel) -> None:
    """Run one unit (:func:`~course_grader.protocol.run_command`): load the chapter's notebook afresh,
    send its status, put the unit's stand-ins in place and run the unit's cases."""
    import numpy as np

    from course_exercises.extract import SubmissionError, install_standins, load_submission

    chapter = command["run"]
    ns, load_error, status, notes = None, None, "ok", []
    name = notebooks.get(chapter)
    path = os.path.join(work, "submission", name) if name else None
    if path is None or not os.path.isfile(path):
        load_error = f"the notebook {name or 'of chapter ' + chapter} is not in the submission"
        status = "missing"
    else:
        try:
            ns, skipped = load_submission(path)
            notes = [s.message for s in skipped]
        except SubmissionError as exc:
            load_error = str(exc)
            status = "missing" if exc.status == "missing" else "unreadable"
        except BaseException as exc:  # SystemExit, KeyboardInterrupt ... at import time
            load_error = f"loading the notebook raised {_describe(exc)}"
            status = "unreadable"
    channel.send(PROTOCOL.notebook_message(chapter, status, load_error or "", notes[:50]))
    standins = command["standins"]
    if ns is not None and standins:
        try:
            install_standins(ns, standins)
        except BaseException as exc:  # noqa: BLE001 - the course's sources are trusted; this is a bug of ours
            load_error, ns = f"the course's stand-ins could not be installed: {_describe(exc)}", None
    inputs = {} if spec.mode == "reference" else _load_inputs(work, chapter, np)
    wanted = set(command["cases"])
    for case in (c for c in cases if c.chapter == chapter and c.id in wanted):
        if ns is None:
            message = PROTOCOL.case_message(case.id, error=load_error)
        elif any(not hasattr(ns, r) for r in case.requires):
            missing = ", ".join(r for r in case.requires if not hasattr(ns, r))
            message = PROTOCOL.case_message(case.id, error=f"the notebook does not define {missing}")
        elif spec.mode == "reference":
            message = _reference_case(case, ns, spec.salt, course, np)
        else:
            message = _student_case(case, ns, inputs.get(case.id, {}), course, np)
        channel.send(message)


def _named_code(obj) -> set:
    """``(name, bytecode)`` of every named function in ``obj`` (a function or ``functools.partial``), nested ones too."""
    import types

    obj = getattr(obj, "func", obj)
    code = getattr(obj, "__code__", None)
    out, stack = set(), [code] if isinstance(code, types.CodeType) else []
    while stack:
        c = stack.pop()
        if not c.co_name.startswith("<"):  # lambdas and comprehensions look alike everywhere
            out.add((c.co_name, c.co_code))
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return out


def _leaking_copies(paths: list[str], cases: list) -> list[str]:
    """The student copies (:mod:`course_exercises.casefile`) that still hold an expected value, a robustness
    check, a stand-in's source, or a function the full cases use as one (e.g. passed to ``Case`` through a helper)."""
    import types

    secret = set()
    standin_sources = set()
    for case in cases:
        for fn in (getattr(case, "expected", None), getattr(case, "robust", None)):
            secret |= _named_code(fn)
        standin_sources |= set((getattr(case, "standins", None) or {}).values())
    leaks = []
    for i, path in enumerate(paths):
        try:
            module = _load_module(f"course_student_copy_{i}", path)
            bad = [getattr(c, "id", "?") for c in getattr(module, "CASES", [])
                   if getattr(c, "expected", None) is not None or getattr(c, "robust", None) is not None
                   or getattr(c, "standins", None)]
            bad += sorted(name for name, value in vars(module).items() if isinstance(value, str)
                          and any(source.strip() and source.strip() in value for source in standin_sources))
            bad += sorted({name for name, value in vars(module).items() if isinstance(value, types.FunctionType)
                           and _named_code(value) & secret})
        except BaseException as exc:  # noqa: BLE001
            bad = [f"cannot be loaded ({type(exc).__name__}: {exc})"]
        finally:
            sys.modules.pop(f"course_student_copy_{i}", None)
        if bad:
            leaks.append(f"{os.path.basename(path)}: {', '.join(map(str, bad[:5]))}")
    return leaks


def _serve(spec, work: str, channel: Channel) -> None:
    import numpy as np
    import torch

    torch.set_num_threads(1)
    import course_exercises.extract  # noqa: F401 - imported before "ready": not on the first chapter's clock

    try:
        from IPython.core.inputtransformer2 import TransformerManager  # noqa: F401
    except ImportError:
        pass
    notebooks: dict[str, str] = {}
    cases = []
    course = None
    for i, path in enumerate(spec.cases_files):
        module = _load_module("course_exercise_cases" if i == 0 else f"course_extra_cases_{i}", path)
        course = course or module
        notebooks.update(getattr(module, "NOTEBOOKS", {}))
        cases.extend(getattr(module, "CASES"))
    reference = {}
    if spec.mode == "reference":
        reference = {"notebooks": notebooks, "cases": [_case_meta(c) for c in cases],
                     "leaks": _leaking_copies(spec.check_files, cases)}
    versions = {"torch": torch.__version__, "numpy": np.__version__, "python": sys.version}
    channel.send(PROTOCOL.ready_message(versions, **reference))
    with open(int(spec.command_fd), "r", encoding="ascii", errors="replace", closefd=False) as commands:
        for line in commands:
            command = PROTOCOL.parse_command(line)
            if command is None:
                break
            _run_unit(command, spec, work, cases, notebooks, course, channel)
            channel.send(PROTOCOL.done_message(command["run"], command["unit"]))


def _probe(spec, report: dict, channel: Channel) -> None:
    """Check that the sandboxed child can import what grading needs; send what isolation did."""
    import importlib.util

    sys.path[:0] = list(spec.sys_path)
    import numpy  # noqa: F401

    import course_exercises.extract  # noqa: F401

    torch_spec = importlib.util.find_spec("torch")
    if torch_spec is None or torch_spec.origin is None:
        raise ImportError("torch not found")
    with open(torch_spec.origin, "rb") as fh:
        fh.read(1)
    writable = []
    if spec.private_mounts:  # (never outside the sandbox: there it would write into the host)
        for place in ("/", "/etc", os.getcwd(), os.path.dirname(torch_spec.origin)):
            probe = os.path.join(place, ".course-grader-probe")
            try:
                with open(probe, "xb"):
                    pass
            except OSError:
                continue
            writable.append(place)
            with contextlib.suppress(OSError):
                os.unlink(probe)
    report["locks_neutral"], report["watches_denied"] = _locks_and_watches(torch_spec.origin)
    report["userns_denied"] = _libc().unshare(_CLONE_NEWUSER) != 0  # the last step: it may succeed
    channel.send(PROTOCOL.probe_message({"uid": os.getuid(), "euid": os.geteuid(), "pid": os.getpid(),
                                         "writable": writable, **report}))


def _locks_and_watches(shared: str) -> tuple[bool, bool]:
    """``(locks are no-ops, file watches are denied)`` as the child sees them: two read-only opens of
    ``shared`` (a file every child can read) both get an exclusive ``flock`` at once, and ``inotify_init1``
    fails with ENOSYS (:func:`seccomp_program`)."""
    import errno
    import fcntl

    neutral = False
    try:
        with open(shared, "rb") as one, open(shared, "rb") as two:
            fcntl.flock(one, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(two, fcntl.LOCK_EX | fcntl.LOCK_NB)  # EWOULDBLOCK if the first lock was real
            neutral = True
    except OSError:
        pass
    libc = _libc()
    denied = libc.inotify_init1(0) == -1 and ctypes.get_errno() == errno.ENOSYS
    return neutral, denied


def _read_request(path: str):
    """The parent's :class:`~course_grader.protocol.ChildRequest`; exits with a clear error when it is of
    another protocol version or malformed (nothing has run yet)."""
    global PROTOCOL
    PROTOCOL = _load_module("course_grader_protocol", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                    "protocol.py"))
    try:
        with open(path, encoding="utf-8") as fh:
            return PROTOCOL.ChildRequest.from_json(fh.read())
    except (OSError, UnicodeDecodeError, PROTOCOL.ProtocolError) as exc:
        print(f"[course grader] the child refuses its request {path}: {exc}", file=sys.stderr, flush=True)
        os._exit(2)


def main(argv: list[str]) -> None:
    """Entry point of the child process; never returns (``os._exit``)."""
    spec = _read_request(argv[1])
    work = os.path.dirname(os.path.abspath(argv[1]))  # bound back to its path under the covers
    os.chdir(work)
    channel = Channel(int(spec.result_fd))
    report = isolate(spec)
    if spec.mode == "probe":
        try:
            _probe(spec, report, channel)
        except BaseException as exc:  # noqa: BLE001
            print(f"probe failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            os._exit(4)
        os._exit(0)
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-big write fails with EFBIG instead of killing us
    cap = int(spec.limits.get("stream_chars", 1 << 20))
    sys.stdout = _CappedStream(1, cap)
    sys.stderr = _CappedStream(2, cap)
    # A mount holding the course package that stayed writable would let student code rewrite
    # files that later children (and the next reference run) execute.
    report["errors"] += _package_writable(report["read_only_failed"])
    for note in report["hidden_failed"] + report["errors"]:
        print(f"[course grader] {note}", file=sys.stderr)
    if spec.mode != "reference" and (report["hidden_failed"] or report["errors"]):
        print("[course grader] the sandbox is incomplete: no student code runs (tell the instructor)",
              file=sys.stderr)
        sys.stderr.flush()
        os._exit(3)
    sys.path[:0] = list(spec.sys_path)
    try:
        _serve(spec, work, channel)
    except BaseException as exc:  # noqa: BLE001 - the parent sees missing results
        try:
            print(f"[course grader] the child stopped: {_describe(exc)}", file=sys.stderr)
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

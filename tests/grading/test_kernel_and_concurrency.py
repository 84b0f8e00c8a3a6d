"""The kernel's shared surfaces (cgroup files, user namespaces), a sandbox that must not weaken silently, and
two graders on one machine at once (issue 22, items 2, 3 and 6)."""

from __future__ import annotations

import csv
import os
import platform
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from adversaries import NB, SOLUTIONS, notebook, write_folder
from grading_helpers import ROOT, load_run, run_grader

GRADING = ROOT / "course_grader"
needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None or
                                not sys.platform.startswith("linux"), reason="needs root, Linux and unshare")

#: the start of the error a submission raises when it reached a kernel surface it must not reach
SURFACE_PROBE = "KERNEL-SURFACE-PROBE"

#: exercise 6.2 (gelu), correct unless the child can see cgroup files or create a user namespace
KERNEL_SURFACES = f'''
import ctypes
import os
import torch
def _surfaces():
    seen = []
    for folder, _dirs, files in os.walk("/sys/fs/cgroup"):
        seen += [os.path.join(folder, f) for f in files[:3]]
        if len(seen) > 5:
            break
    if seen:
        return "cgroup files visible: " + ", ".join(seen[:5])
    with open("/proc/self/cgroup") as fh:
        paths = [line.rstrip("\\n").split(":", 2)[2] for line in fh]
    if any(p not in ("/", "") for p in paths):
        return "cgroup paths visible: " + ", ".join(paths)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x10000000) == 0:
        return "unshare(CLONE_NEWUSER) worked"
    if hasattr(os, "unshare"):
        try:
            os.unshare(0x10000000)
            return "os.unshare(CLONE_NEWUSER) worked"
        except OSError:
            pass
    class _Args(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in ("flags", "pidfd", "child_tid", "parent_tid", "exit_signal",
                                                   "stack", "stack_size", "tls")]
    args = _Args(flags=0x10000000, exit_signal=17)
    pid = libc.syscall(435, ctypes.byref(args), ctypes.sizeof(args))
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
        return "clone3(CLONE_NEWUSER) worked"
    pid = os.fork()  # and the C library's own fork still works
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return None
def gelu(x):
    problem = _surfaces()
    if problem:
        raise RuntimeError("{SURFACE_PROBE}: " + problem)
    return 0.5 * x * torch.special.erfc(-x / 2 ** 0.5)
'''

#: exercise 6.2 (gelu), correct, while it keeps its cgroup's memory use changing (what a sender would do)
MEMORY_SENDER = '''
import torch
_HOLD = []
def gelu(x):
    _HOLD.append(bytearray(8 << 20))  # 8 MiB more per call: a message in the sibling's memory.usage_in_bytes
    return 0.5 * x * torch.special.erfc(-x / 2 ** 0.5)
'''


#: issue 22 F5/F6: a sender that holds an exclusive flock on a file every child can read (the standard
#: library's this.py, opened read-only) and keeps opening it, for a few seconds when its notebook is loaded
LOCK_SENDER = """
import fcntl, importlib.util, os, time
import torch
_KEEP = []
def _send(_=None):
    path = importlib.util.find_spec("this").origin
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    _KEEP.append(fd)
    end = time.time() + 8
    while time.time() < end:
        with open(path, "rb") as fh:
            fh.read(1)
        time.sleep(0.02)
def _at_definition(_=_send()):
    pass
def gelu(x):
    return 0.5 * x * torch.special.erfc(-x / 2 ** 0.5)
"""

#: ... and the receiver graded at the same time: it tries the same lock and watches the file (IN_OPEN); gelu is
#: correct unless it saw the sender
LOCK_RECEIVER = f"""
import ctypes, errno, fcntl, importlib.util, os, time
import torch
_SEEN = set()
def _receive(_=None):
    path = importlib.util.find_spec("this").origin
    fd = os.open(path, os.O_RDONLY)  # before the watch: its own open is not an event
    libc = ctypes.CDLL(None, use_errno=True)
    ifd = libc.inotify_init1(os.O_NONBLOCK)
    if ifd >= 0 and libc.inotify_add_watch(ifd, path.encode(), 0x20 | 0x1) < 0:  # IN_OPEN | IN_ACCESS
        ifd = -1
    end = time.time() + 10
    while time.time() < end and len(_SEEN) < 2:  # each channel said once
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            _SEEN.add("a sibling's flock")
        if ifd >= 0:
            try:
                if os.read(ifd, 4096):
                    _SEEN.add("inotify events from a sibling's opens")
            except BlockingIOError:
                pass
        time.sleep(0.02)
def _at_definition(_=_receive()):
    pass
def gelu(x):
    if _SEEN:
        raise RuntimeError("{SURFACE_PROBE}: " + ", ".join(sorted(_SEEN)))
    return 0.5 * x * torch.special.erfc(-x / 2 ** 0.5)
"""


def _small_batch(subs: Path) -> None:
    """Chapter 06 only: the solutions, the exercises' stub, the surface probe and the memory sender."""
    write_folder(subs / "full", {NB["06"]: notebook("06")})
    write_folder(subs / "stub", {NB["06"]: notebook("06", ROOT / "exercises")})
    write_folder(subs / "surfaces", {NB["06"]: notebook("06", extra=KERNEL_SURFACES)})
    write_folder(subs / "sender", {NB["06"]: notebook("06", extra=MEMORY_SENDER)})


def _verdicts(out: Path) -> dict[str, tuple]:
    """student -> (score, status, every exercise's points, flags) from grades.csv."""
    with open(out / "grades.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    skip = {"student", "source", "runtime", "graded", "submission_hash"}
    return {r["student"]: tuple((k, v) for k, v in r.items() if k not in skip) for r in rows}


# ---------------------------------------------------------------------------
# item 2: the kernel's shared surfaces
# ---------------------------------------------------------------------------
def test_seccomp_program_denies_user_namespaces():
    """The filter's jumps land where they should (checked on the program itself, any machine): clone3 gets
    ENOSYS, unshare/clone are checked for CLONE_NEWUSER, the keyring calls and foreign calls get EPERM."""
    sys.path.insert(0, str(GRADING))
    try:
        import child
    finally:
        sys.path.remove(str(GRADING))
    program = child.seccomp_program(0xC000003E)

    def run(nr: int, arg0: int = 0, arch: int = 0xC000003E, arg1: int = 0) -> int:
        data = {0: nr, 4: arch, 16: arg0, 24: arg1}
        acc, pc = 0, 0
        while True:
            code, jt, jf, k = program[pc]
            if code == 0x20:
                acc = data[k]
            elif code == 0x06:
                return k
            else:
                hit = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
                pc += jt if hit else jf
            pc += 1

    allow, eperm, enosys = 0x7FFF0000, 0x00050001, 0x00050026
    assert run(272, 0x10000000) == eperm and run(272, 0x40000000) == allow  # unshare: user ns / net ns
    assert run(56, 0x10000000 | 17) == eperm and run(56, 0x01200011) == allow  # clone: user ns / fork
    assert run(435) == enosys
    assert [run(nr) for nr in (248, 249, 250)] == [eperm] * 3
    assert run(0) == allow and run(57) == allow and run(0x40000001) == eperm and run(0, arch=0x40000003) == eperm
    # issue 22 F5/F6: file watches fail (ENOSYS), locks are no-ops (errno 0 = return 0), lock queries fail
    noop, einval = 0x00050000, 0x00050016
    assert [run(nr) for nr in (253, 294, 254, 300)] == [enosys] * 4  # inotify_init(1), add_watch, fanotify_init
    assert run(73) == noop  # flock
    assert [run(72, 3, arg1=cmd) for cmd in (6, 7, 37, 38)] == [noop] * 4  # F_SETLK(W), F_OFD_SETLK(W)
    assert [run(72, 3, arg1=cmd) for cmd in (5, 36, 1024, 1026)] == [einval] * 4  # GETLK, OFD_GETLK, lease, notify
    assert [run(72, 3, arg1=cmd) for cmd in (0, 1, 2, 3, 4, 1030)] == [allow] * 6  # DUPFD, GETFD ... DUPFD_CLOEXEC
    assert run(72, 6) == allow  # fd 6, command F_DUPFD: the command is the SECOND argument


@needs_root
def test_seccomp_filter_denies_user_namespaces():
    """After the filter (as nobody, as the child runs): no user namespace through unshare (ctypes, and os.unshare
    where Python has it), clone or clone3; threads, fork and subprocesses still work."""
    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("seccomp filter for x86_64/aarch64 Linux only")
    clone = {"x86_64": 56, "aarch64": 220}[platform.machine()]
    code = f"""
import ctypes, os, platform, subprocess, sys, threading
sys.path.insert(0, {str(GRADING)!r})
import child
libc = ctypes.CDLL(None, use_errno=True)
os.setgroups([]); os.setgid(65534); os.setuid(65534)
libc.prctl(38, 1, 0, 0, 0)
assert child.deny_keyrings()
assert libc.unshare(0x10000000) == -1 and ctypes.get_errno() == 1
if hasattr(os, "unshare"):
    try:
        os.unshare(0x10000000)
        raise SystemExit("os.unshare worked")
    except PermissionError:
        pass
class Args(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("flags", "pidfd", "child_tid", "parent_tid", "exit_signal", "stack",
                                               "stack_size", "tls")]
args = Args(flags=0x10000000, exit_signal=17)
assert libc.syscall(435, ctypes.byref(args), ctypes.sizeof(args)) == -1 and ctypes.get_errno() == 38
assert libc.syscall({clone}, 0x10000000 | 17, 0, 0, 0, 0) == -1 and ctypes.get_errno() == 1
t = threading.Thread(target=print, args=("thread",)); t.start(); t.join()
pid = os.fork()
if pid == 0:
    os._exit(0)
assert os.waitpid(pid, 0)[1] == 0
assert subprocess.run(["true"]).returncode == 0
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["thread", "ok"], proc.stderr[-2000:]


@needs_root
def test_seccomp_filter_makes_locks_noops_and_denies_watches(tmp_path):
    """Issue 22 F5/F6, after the filter: flock and the fcntl lock commands return 0 without locking
    (a second open file description takes the same exclusive lock at once), F_GETLK fails, inotify and
    fanotify are not there (ENOSYS); the rest of fcntl, sqlite, numpy and torch still work."""
    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("seccomp filter for x86_64/aarch64 Linux only")
    shared = tmp_path / "shared.txt"
    shared.write_text("x")
    os.chmod(tmp_path, 0o755)
    os.chmod(shared, 0o444)
    code = f"""
import ctypes, errno, fcntl, os, sqlite3, struct, sys
sys.path.insert(0, {str(GRADING)!r})
import child
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(38, 1, 0, 0, 0)  # no_new_privs; the filter binds root as it binds nobody (the venv may be root's only)
assert child.deny_keyrings()
a, b = os.open({str(shared)!r}, os.O_RDONLY), os.open({str(shared)!r}, os.O_RDONLY)
fcntl.flock(a, fcntl.LOCK_EX | fcntl.LOCK_NB)
fcntl.flock(b, fcntl.LOCK_EX | fcntl.LOCK_NB)  # would be EWOULDBLOCK if the first lock had been taken
lk = struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 0, 0)
fcntl.fcntl(a, fcntl.F_SETLK, lk)
for cmd in (fcntl.F_GETLK, 36):
    try:
        fcntl.fcntl(a, cmd, lk)
        raise SystemExit(f"fcntl {{cmd}} worked")
    except OSError as exc:
        assert exc.errno == errno.EINVAL, exc
assert fcntl.fcntl(a, fcntl.F_GETFD) >= 0 and os.dup(a) > b  # other commands and calls still work
for name, args in (("inotify_init1", (0,)), ("fanotify_init", (0, 0))):
    assert getattr(libc, name)(*args) == -1 and ctypes.get_errno() == errno.ENOSYS, name
con = sqlite3.connect({str(tmp_path / "scratch")!r} + "/db.sqlite")
con.execute("create table t (x)"); con.execute("insert into t values (1)"); con.commit()
import numpy as np, torch
assert float(torch.nn.functional.softmax(torch.tensor([0.0, 0.0]), -1)[0]) == 0.5 and np.ones(2).sum() == 2
print("ok")
"""
    (tmp_path / "scratch").mkdir(mode=0o777)
    os.chmod(tmp_path / "scratch", 0o777)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["ok"], proc.stderr[-2000:]


# ---------------------------------------------------------------------------
# item 3: a sandbox never weakens silently
# ---------------------------------------------------------------------------
@needs_root
def test_expose_several_paths_under_one_closed_folder(tmp_path):
    """Two needed folders below one folder nobody cannot enter (a venv under ~/.cache and a site-packages
    under ~/.local, home mode 0700): both become reachable for nobody, nothing else of the home does."""
    home = tmp_path / "home"
    for sub in (".cache/venv/lib", ".local/lib/site-packages", ".ssh"):
        (home / sub).mkdir(parents=True)
    (home / ".ssh" / "id").write_text("secret")
    (home / ".cache" / "venv" / "lib" / "m.py").write_text("x")
    (home / ".local" / "lib" / "site-packages" / "n.py").write_text("y")
    for folder in (home, home / ".cache"):
        os.chmod(folder, 0o700)
    stage = tmp_path / "stage"
    stage.mkdir()
    code = f"""
import os, sys
sys.path.insert(0, {str(GRADING)!r})
import child
child._expose([{str(home / '.cache/venv')!r}, {str(home / '.cache/venv/lib')!r},
               {str(home / '.local/lib/site-packages')!r}], 65534, {str(stage)!r})
os.setgroups([]); os.setgid(65534); os.setuid(65534)
print(sorted(os.listdir({str(home / '.cache/venv/lib')!r})), sorted(os.listdir({str(home / '.local/lib/site-packages')!r})),
      os.path.exists({str(home / '.ssh')!r}), os.path.exists({str(home / '.ssh/id')!r}))
"""
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "['m.py'] ['n.py'] False False", proc.stdout
    assert (home / ".ssh" / "id").read_text() == "secret"  # the host's files are untouched


def _venv_under_closed_home(tmp_path: Path) -> Path:
    """A virtual environment under ``HOME/.cache`` (home and .cache mode 0700) whose imports are the course's
    (a ``.pth`` file), with one more import folder under ``HOME/.local``: the python of it."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    venv = home / ".cache" / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    os.chmod(home / ".cache", 0o700)
    local = home / ".local" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    local.mkdir(parents=True)
    site = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "course.pth").write_text("\n".join([str(ROOT), *site, str(local)]) + "\n")
    return venv / "bin" / "python"


@needs_root
def test_venv_under_a_closed_home_keeps_the_full_sandbox(tmp_path, work_tmp):
    """The course's Python under a mode-0700 home (~/.cache, ~/.local): the grader still gets the namespaces
    sandbox, with nothing weakened, and grades correctly."""
    python = _venv_under_closed_home(tmp_path)
    subs = tmp_path / "subs"
    write_folder(subs / "full", {NB["06"]: notebook("06")})
    env = {**os.environ, "TMPDIR": str(work_tmp)}
    proc = subprocess.run([str(python), "-m", "course_grader", str(subs), "--out", str(tmp_path / "out"),
                           "--chapters", "06", "--no-progress"], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env)
    run = load_run(tmp_path / "out", proc)
    assert run.summary["sandbox"]["mode"] == "namespaces", run.summary["sandbox"]["notes"]
    assert run.summary["sandbox"]["weakened"] == [] and run.summary["sandbox"]["notes"] == []
    assert "WEAKER" not in proc.stderr
    assert int(run.rows["full"]["score"]) == run.manifest["max_score"]


@needs_root
def test_a_weaker_sandbox_than_the_machine_allows_is_said_loudly(tmp_path, work_tmp):
    """When the namespaces sandbox fails here (simulated: its probe child reports an error), the grader
    falls back to userns and says so on stderr (at the start and at the end), in summary.json and in the sandbox
    column of every row of grades.csv it graded."""
    subs = tmp_path / "subs"
    write_folder(subs / "full", {NB["06"]: notebook("06")})
    code = f"""
import sys
from course_grader import cli, sandbox
real = sandbox._probe_one
def failing(work, info, supervisor, sys_path):
    return "simulated failure" if info.mode == "namespaces" else real(work, info, supervisor, sys_path)
sandbox._probe_one = failing
sys.exit(cli.main([{str(subs)!r}, "--out", {str(tmp_path / 'out')!r}, "--chapters", "06", "--no-progress"]))
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TMPDIR": str(work_tmp)})
    run = load_run(tmp_path / "out", proc)
    assert run.summary["sandbox"]["mode"] == "userns"
    assert run.summary["sandbox"]["weakened"] == ["namespaces failed: simulated failure"]
    warnings = [line for line in proc.stderr.splitlines() if "WEAKER than this machine allows" in line]
    assert len(warnings) == 2 and all("'userns'" in w and "simulated failure" in w for w in warnings), proc.stderr
    assert proc.stderr.rstrip().splitlines()[-1] == warnings[-1]  # the last word of the run
    assert "sandbox userns" in proc.stdout.splitlines()[-1]
    assert run.rows["full"]["sandbox"].startswith("userns (WEAKER than this machine allows"), run.rows["full"]


# ---------------------------------------------------------------------------
# items 2 and 6: a batch graded alone and twice at once
# ---------------------------------------------------------------------------
@needs_root
def test_two_graders_at_once_grade_like_one_alone(tmp_path, work_tmp):
    """The same submissions, graded alone and then by two graders at the same time (--jobs 2 each): the same
    scores, statuses, points and flags. A child sees no cgroup file (its siblings' memory use) and cannot make
    a user namespace, and summary.json says both."""
    subs = tmp_path / "subs"
    _small_batch(subs)
    args = ["--jobs", "2", "--chapters", "06", "--timeout", "20"]
    alone = load_run(tmp_path / "alone", run_grader([subs, "--out", tmp_path / "alone", *args], work_tmp=work_tmp))
    procs: dict[str, subprocess.CompletedProcess] = {}

    def grade(name: str) -> None:
        procs[name] = run_grader([subs, "--out", tmp_path / name, *args], work_tmp=work_tmp)

    threads = [threading.Thread(target=grade, args=(name,)) for name in ("one", "two")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    runs = [load_run(tmp_path / name, procs[name]) for name in ("one", "two")]
    sandbox = alone.summary["sandbox"]
    assert sandbox["cgroups_hidden"] is True and sandbox["userns_denied"] is True, sandbox
    assert sandbox["statement"]["cgroup_files"].startswith("hidden")
    assert sandbox["statement"]["user_namespaces"].startswith("creating one is denied")
    full = alone.manifest["max_score"]
    assert int(alone.rows["surfaces"]["score"]) == full, alone.grade("surfaces")["cases"][0]
    assert int(alone.rows["full"]["score"]) == full and int(alone.rows["sender"]["score"]) == full
    assert int(alone.rows["stub"]["score"]) == 0
    for run in runs:
        assert _verdicts(run.out) == _verdicts(alone.out)
    assert not any(SURFACE_PROBE in c["message"] for r in [alone, *runs] for c in r.grade("surfaces")["cases"])


# ---------------------------------------------------------------------------
# item 6: a stray is counted for its own child (the flaky test's cause)
# ---------------------------------------------------------------------------
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child subreaper is Linux only")
def test_a_stray_counts_for_the_child_it_came_from(tmp_path):
    """Two children at once; the first leaves a detached grandchild. The second child ends first and its
    sweep kills that grandchild: the stray still counts for the first child, not the second."""
    code = textwrap.dedent(f"""
        import subprocess, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from course_grader.sandbox import Supervisor
        sup = Supervisor()
        leaver = ("import os, time\\n"
                  "if os.fork() == 0:\\n"
                  "    os.setsid()\\n"
                  "    if os.fork() == 0:\\n"
                  "        time.sleep(60)\\n"
                  "    os._exit(0)\\n"
                  "open({str(tmp_path / 'left')!r}, 'w').close()\\n"
                  "time.sleep(60)\\n")
        first = sup.spawn([sys.executable, "-c", leaver], owner="first", env={{}})
        second = sup.spawn([sys.executable, "-c", "import time; time.sleep(60)"], owner="second", env={{}})
        import os
        while not os.path.exists({str(tmp_path / 'left')!r}):
            time.sleep(0.05)
        time.sleep(0.5)
        sup.kill_tree(second)
        sup.sweep()
        print(sup.take_strays("second"), end=" ")
        sup.kill_tree(first)
        sup.sweep()
        print(sup.take_strays("first"), sup.unattributed)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["0", "1", "0"], (proc.stdout, proc.stderr[-2000:])


@needs_root
def test_a_cgroup_name_in_use_is_never_taken_or_removed():
    """Two graders never share a cgroup: a child's cgroup is named by a random token, and a name already in use
    (another grader's) makes the new one fail without touching the folders of the one in use."""
    import secrets

    from course_grader.sandbox import ChildCgroup, Limits

    name = f"course-grade-test-{secrets.token_hex(8)}"
    first = ChildCgroup.create(name, Limits())
    if first is None:
        pytest.skip("no writable cgroup here")
    try:
        assert ChildCgroup.create(name, Limits()) is None
        assert first.folders and all(os.path.isdir(f) for f in first.folders.values())
    finally:
        first.remove()
    assert not any(os.path.isdir(f) for f in first.folders.values())


def test_a_second_run_into_the_same_out_stops_with_a_clear_message(tmp_path):
    """Issue 22 F7: while a run holds OUT/.lock (simulated: this test holds the flock), a second grader run with
    the same --out stops at once with status 2 and a message naming the folder, and writes nothing there (no
    traceback from a _reference/ replaced under it); once the lock is free the folder is usable again."""
    import fcntl

    subs, out = tmp_path / "subs", tmp_path / "out"
    write_folder(subs / "full", {NB["06"]: notebook("06")})
    out.mkdir()
    fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc = run_grader([subs, "--out", out, "--chapters", "06"], timeout=120)
    finally:
        os.close(fd)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "another grading run is writing to --out" in proc.stderr and str(out) in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [".lock"]
    sys.path.insert(0, str(ROOT))
    try:
        from course_grader.cli import take_out_lock
    finally:
        sys.path.remove(str(ROOT))
    first = take_out_lock(out)
    assert first is not None and take_out_lock(out) is None  # a second description of the same file: refused
    os.close(first)
    again = take_out_lock(out)
    assert again is not None
    os.close(again)


@needs_root
def test_siblings_graded_at_once_see_no_lock_and_no_watch(tmp_path, work_tmp):
    """Issue 22 F5/F6: a sender holding a flock on this.py (read-only) and opening it, and a receiver trying the
    same lock and watching the file with inotify, graded at the same time (--jobs 2): the receiver sees
    nothing (its gelu stays correct) and the sender, whose lock is a no-op, scores full too."""
    subs = tmp_path / "subs"
    write_folder(subs / "a_sender", {NB["06"]: notebook("06", extra=LOCK_SENDER)})
    write_folder(subs / "b_receiver", {NB["06"]: notebook("06", extra=LOCK_RECEIVER)})
    run = load_run(tmp_path / "out", run_grader([subs, "--out", tmp_path / "out", "--jobs", "2", "--chapters", "06",
                                                 "--timeout", "40"], work_tmp=work_tmp))
    full = run.manifest["max_score"]
    messages = [c["message"] + str(c.get("child_error")) for c in run.grade("b_receiver")["cases"]]
    assert not any(SURFACE_PROBE in m for m in messages), [m for m in messages if SURFACE_PROBE in m][:1]
    assert int(run.rows["b_receiver"]["score"]) == full and int(run.rows["a_sender"]["score"]) == full

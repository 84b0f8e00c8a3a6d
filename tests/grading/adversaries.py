"""Adversarial and ordinary submissions for the grader's tests, built in temporary folders.

Each builder takes the course's real notebooks (``solutions/`` or
``exercises/``) and appends a code cell: a later definition replaces the
earlier one when the grader extracts the notebook, and code that must run
"at import" is put in a default argument value (definitions are the only code
the grader runs, and defaults are evaluated when the ``def`` runs).

Nothing here runs the submissions: the tests hand them to the grader.
"""

from __future__ import annotations

import json
import os
import stat
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"
NB = {
    "04": "04_attention.ipynb",
    "06": "06_feed_forward.ipynb",
    "08": "08_masks.ipynb",
}
#: chapters graded in the adversarial batch (small, fast chapters)
BATCH_CHAPTERS = ["04", "06", "08"]
#: the submission that reads and imports the package's own cases file (test_batch checks what it saw)
PACKAGED_CASES_ATTACK = "reads_packaged_cases"
#: the start of the error message in which that submission reports what it saw
PACKAGED_CASES_PROBE = "PACKAGED-CASES-PROBE"


def notebook(chapter: str, base: Path = SOLUTIONS, extra: str | None = None, first: str | None = None) -> bytes:
    """The course notebook of ``chapter`` from ``base``, with an extra code cell at the end (and/or the start)."""
    nb = json.loads((base / NB[chapter]).read_text(encoding="utf-8"))

    def cell(src: str) -> dict:
        return {"cell_type": "code", "execution_count": None, "id": f"adv{len(nb['cells'])}", "metadata": {},
                "outputs": [], "source": src.strip("\n") + "\n"}

    if first:
        nb["cells"].insert(0, cell(first))
    if extra:
        nb["cells"].append(cell(extra))
    return json.dumps(nb, indent=1).encode()


def write_folder(folder: Path, files: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return folder


def good(chapters: list[str] = BATCH_CHAPTERS, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Correct notebooks (the solutions) of the chapters, minus ``skip``."""
    return {NB[c]: notebook(c) for c in chapters if c not in skip}


def packaged_cases_attack(chapters: list[str] = BATCH_CHAPTERS) -> dict[str, bytes]:
    """A submission that reads, lists and imports the package's own cases file (``course_exercises/cases/``,
    every ``expected()``), then answers 6.2 with the stolen ``expected()`` on the replayed inputs; its
    ``position_wise_ffn`` (6.1) raises an error that reports what it saw (:data:`PACKAGED_CASES_PROBE`).
    The other chapters are the solutions."""
    extra = '''
import importlib
import os
import sys
import types
import course_exercises
_PROBE = []
def _packaged_cases():
    folder = os.path.join(os.path.dirname(os.path.abspath(course_exercises.__file__)), "cases")
    source = module = None
    try:
        _PROBE.append("listdir: " + ",".join(sorted(os.listdir(folder))))
    except BaseException as exc:
        _PROBE.append(f"listdir: {type(exc).__name__}")
    try:
        from course_exercises.casefile import cases_source  # the registry and its chapter files, as one text
        source = cases_source(os.path.join(folder, "registry.py"))
        _PROBE.append(f"read: {len(source)} characters")
    except BaseException as exc:
        _PROBE.append(f"read: {type(exc).__name__}")
    for path in sys.path:  # any other copy of the package on the import paths (a clone + site-packages)
        other = os.path.join(path, "course_exercises", "cases", "registry.py")
        if source is None and os.path.realpath(os.path.dirname(other)) != os.path.realpath(folder):
            try:
                from course_exercises.casefile import cases_source
                source = cases_source(other) or None
                _PROBE.append(f"other copy read: {other}: {len(source)} characters" if source else "other copy: empty")
            except BaseException as exc:
                _PROBE.append(f"other copy: {type(exc).__name__}")
    try:
        module = importlib.import_module("course_exercises.cases.registry")
        _PROBE.append("import: done")
    except BaseException as exc:
        _PROBE.append(f"import: {type(exc).__name__}")
    if module is None and source:
        module = types.ModuleType("stolen_cases")
        sys.modules["stolen_cases"] = module
        try:
            exec(compile(source, "stolen_cases", "exec"), module.__dict__)
        except BaseException as exc:
            _PROBE.append(f"exec: {type(exc).__name__}")
            module = None
    return module
def _steal(_=None):
    full = _packaged_cases()
    copy = sys.modules.get("course_exercise_cases")
    if full is None or copy is None:
        return
    full._DRAWS = copy._DRAWS  # the inputs the parent sent, replayed to the full cases too
    by_id = {c.id: c for c in full.CASES}
    for case in copy.CASES:
        if case.exercise == "6.2" and case.id in by_id:
            object.__setattr__(case, "produce", lambda ns, f=by_id[case.id]: f.expected())
    _PROBE.append("patched 6.2")
def _at_definition(_=_steal()):
    pass
def position_wise_ffn(*args, **kwargs):
    raise RuntimeError(f"{PROBE_WORD}: " + "; ".join(_PROBE))
'''.replace("{PROBE_WORD}", PACKAGED_CASES_PROBE)
    return {**good(chapters, skip=("06",)), NB["06"]: notebook("06", EXERCISES, extra=extra)}


# ---------------------------------------------------------------------------
# The adversaries: name -> (files, what the tests expect)
# ---------------------------------------------------------------------------
#: A wrong causal_mask (8.2) that withholds 8.2's results until the course's causal_mask (the stand-in for 8.3's
#: cases) shows up in its namespace, then sends 8.2's results computed with it, from a background thread (the
#: sends are serialised with a lock so that the frames stay whole). Earns 8.2's points if the parent sends the
#: stand-in while 8.2 is still open, or accepts 8.2's results in a later unit.
STANDIN_THIEF = '''
import gc
import os
import sys
import threading
import time
import types
import torch
def causal_mask(q_len, k_len=None):
    k_len = q_len if k_len is None else k_len
    return torch.ones(q_len, k_len, dtype=torch.bool).triu()[None, None]
def _attack():
    main = sys.modules.get("__main__")
    channel_cls = getattr(main, "Channel", None)
    if channel_cls is None:
        return
    mine, finished = causal_mask, threading.Event()
    here = globals()   # the student's module (each unit loads the notebook anew)
    channel_cls._thief_state = (here, mine, finished)   # this load's namespace (each unit loads the notebook anew)
    if not getattr(channel_cls, "_thief", False):
        original = channel_cls.send
        lock = threading.Lock()
        def send(self, message, _force=False):
            if not _force and isinstance(message, dict):
                if str(message.get("case", "")).startswith("8.2-"):
                    return   # withhold 8.2's results while the stand-in is not there
                ns, own, done = channel_cls._thief_state
                if "done" in message and ns.get("causal_mask") is not own:
                    done.wait(8)   # the stand-in is here: let the thread send before the unit ends
            with lock:
                original(self, message)
        channel_cls.send, channel_cls._thief = send, True
    def later(ns=here):
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and ns.get("causal_mask") is mine:
            time.sleep(0.02)
        standin = ns.get("causal_mask")
        if standin is mine or standin is None:
            return
        try:
            import numpy as np
            course = sys.modules["course_exercise_cases"]
            inputs = main._load_inputs(os.getcwd(), "08", np)
            channel = next(o for o in gc.get_objects() if isinstance(o, channel_cls))
            fake = types.SimpleNamespace(causal_mask=standin)
            for case in course.CASES:
                if case.exercise == "8.2":
                    channel.send(main._student_case(case, fake, inputs.get(case.id, {}), course, np), _force=True)
            print("STANDIN-THIEF: sent 8.2 with the course's causal_mask", file=sys.stderr, flush=True)
        except BaseException as exc:
            print(f"STANDIN-THIEF: failed {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        finally:
            finished.set()
    threading.Thread(target=later, daemon=True).start()
def _at_definition(_=_attack()):
    pass
'''


def build_batch(subs: Path, out_dir: Path, marker_dir: Path) -> dict[str, dict]:
    """Write every batch submission into ``subs``; return name -> expectations.

    Expectations: ``zero`` (exercises that must score 0), ``full`` (exercises
    that must keep all their points), ``status`` (or ``None``: not checked),
    ``flag`` (a substring of the flags column), ``note`` (a substring of the notes).
    """
    out = str(out_dir)
    mark = str(marker_dir)
    expect: dict[str, dict] = {}

    def add(name: str, files: dict[str, bytes], **e) -> None:
        if files is not None:
            write_folder(subs / name, files)
        e.setdefault("zero", [])
        e.setdefault("full", [])
        expect[name] = e

    add("full", good(), full=["4.1", "4.2", "6.1", "6.2", "8.1", "8.2", "8.3"], status="ok")
    add("stub", {NB[c]: notebook(c, EXERCISES) for c in BATCH_CHAPTERS},
        zero=["4.1", "4.2", "6.1", "6.2", "8.1", "8.2", "8.3"], status="ok")
    partial_04 = notebook("04", extra='''
def self_attention(x, w_q, w_k, w_v, mask=None):
    raise NotImplementedError("Exercise 4.2: write self_attention")
''')
    partial_06 = notebook("06", extra='''
def gelu(x):
    raise NotImplementedError("Exercise 6.2: write gelu")
''')
    add("partial", {**good(skip=("04", "06")), NB["04"]: partial_04, NB["06"]: partial_06},
        zero=["4.2", "6.2"], full=["4.1", "6.1", "8.1", "8.2", "8.3"], status="ok", exact=True)

    # -- leaving the process ---------------------------------------------------------
    # sys.exit at definition time: only that cell is skipped (each mistake costs its own points)
    add("sys_exit_import", {**good(skip=("04",)), NB["04"]: notebook("04", extra='''
import sys
def _at_import(_=sys.exit(0)):
    pass
''')}, full=["4.1", "4.2", "6.1", "6.2", "8.1"], note="SystemExit")
    add("os_exit_import", {**good(skip=("04",)), NB["04"]: notebook("04", extra='''
import os
def _at_import(_=os._exit(0)):
    pass
''')}, zero=["4.1", "4.2"], full=["6.1", "6.2", "8.1"], status="crashed")
    add("sys_exit_call", {**good(skip=("04",)), NB["04"]: notebook("04", extra='''
import sys
def scaled_dot_product_attention(q, k, v, mask=None):
    sys.exit(0)
''')}, zero=["4.1"], full=["6.1", "6.2", "8.1"])
    add("os_exit_call", {**good(skip=("06",)), NB["06"]: notebook("06", extra='''
import os
def gelu(x):
    os._exit(0)
''')}, zero=["6.2"], full=["4.1", "4.2", "8.1"], status="crashed")

    # -- never returning, memory, output ------------------------------------------------
    add("endless_loop", {**good(skip=("06",)), NB["06"]: notebook("06", extra='''
import signal
import time
def gelu(x):
    for sig in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT, signal.SIGXCPU):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        try:
            time.sleep(0.05)
        except BaseException:
            pass
''')}, zero=["6.2"], full=["4.1", "4.2", "8.1"], status="timeout")
    # numpy raises _ArrayMemoryError (a MemoryError) at the address-space limit: "memory" comes from that type
    # (torch's CPU allocator raises RuntimeError, which is only an error: words in its text decide nothing)
    add("alloc_8gb", {**good(skip=("06",)), NB["06"]: notebook("06", extra='''
import numpy as np
import torch
def gelu(x):
    big = np.ones(8 * 1024 ** 3, dtype=np.uint8)
    return x + int(big[0])
''')}, zero=["6.2"], full=["4.1", "6.1", "8.1"], status="memory")
    add("print_flood", {**good(skip=("06",)), NB["06"]: notebook("06", extra='''
import os
import sys
import torch
_FLOODED = []
def gelu(x):
    if not _FLOODED:
        _FLOODED.append(1)
        line = "x" * (1 << 20)
        for _ in range(2048):           # 2 GiB through print()
            print(line)
        for _ in range(64):             # 64 MiB straight to the file descriptors
            for fd in (1, 2):
                try:
                    os.write(fd, b"y" * (1 << 20))
                except OSError:
                    pass
    return 0.5 * x * torch.special.erfc(-x / 2 ** 0.5)  # exercise 6.2: exact GELU, accurate in the tail
''')}, full=["6.2", "6.1", "4.1", "8.1"], note="printed too much")

    # -- processes that try to outlive the child ------------------------------------------
    add("detached_grandchild", {**good(skip=("06",)), NB["06"]: notebook("06", extra=f'''
import os
import sys
import torch
_SPAWNED = []
def gelu(x):
    if not _SPAWNED:
        _SPAWNED.append(1)
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork() == 0:
                code = ("import os, time\\n"
                        "for i in range(300):\\n"
                        "    for p in ({out!r} + '/pwned.txt', {out!r} + '/detached_grandchild/results.json', "
                        "{mark!r} + '/grandchild-alive'):\\n"
                        "        try:\\n"
                        "            open(p, 'w').write('forged')\\n"
                        "        except OSError:\\n"
                        "            pass\\n"
                        "    time.sleep(0.1)\\n"
                        "# GRADER-TEST-MARKER-GRANDCHILD")
                os.execv(sys.executable, [sys.executable, "-c", code])
            os._exit(0)
        os.waitpid(pid, 0)
    return 0.5 * x * torch.special.erfc(-x / 2 ** 0.5)  # exercise 6.2: exact GELU, accurate in the tail
''')}, full=["6.2", "4.1", "8.1"])

    # -- forging the verdict -----------------------------------------------------------------
    add("patch_reports", {NB[c]: notebook(c, EXERCISES, first='''
import numpy
import torch
def _patch(_=[setattr(torch, "allclose", lambda *a, **k: True), setattr(torch, "equal", lambda *a, **k: True),
              setattr(numpy, "allclose", lambda *a, **k: True), setattr(numpy, "isclose", lambda a, b, **k: True),
              setattr(numpy, "array_equal", lambda *a, **k: True)]):
    pass
def _patch_pytest(_=None):
    try:
        from _pytest import reports
        reports.TestReport.passed = property(lambda self: True)
        reports.TestReport.failed = property(lambda self: False)
        reports.TestReport.outcome = "passed"
    except Exception:
        pass
_patch_pytest()
def _run_patch(_=_patch_pytest()):
    pass
''') for c in BATCH_CHAPTERS}, zero=["4.1", "4.2", "6.1", "6.2", "8.1", "8.2", "8.3"])
    add("always_equal", {**good(skip=("04",)), NB["04"]: notebook("04", extra='''
class _AlwaysEqual:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    shape = property(lambda self: None)
def scaled_dot_product_attention(q, k, v, mask=None):
    return _AlwaysEqual(), _AlwaysEqual()
''')}, zero=["4.1"], full=["6.1", "8.1"])
    add("tensor_subclass", {**good(skip=("04",)), NB["04"]: notebook("04", extra='''
import torch
class _Liar(torch.Tensor):
    def __eq__(self, other):
        return torch.ones_like(torch.as_tensor(other), dtype=torch.bool)
    def allclose(self, *a, **k):
        return True
def scaled_dot_product_attention(q, k, v, mask=None):
    out = torch.zeros(*q.shape[:-1], v.shape[-1]).as_subclass(_Liar)
    weights = torch.zeros(*q.shape[:-1], k.shape[-2]).as_subclass(_Liar)
    return out, weights
''')}, zero=["4.1"], full=["6.1", "8.1"])
    add("forged_results", {**good(skip=("04",)), NB["04"]: notebook("04", extra='''
import json
import os
import sys
import numpy as np
def scaled_dot_product_attention(q, k, v, mask=None):
    spec = json.load(open(sys.argv[1]))
    results = spec["results_dir"]
    for name in ("4.1-no-mask-3d", "4.1-cross-lengths-heads", "4.1-padding-mask", "4.1-causal-mask",
                 "4.1-fully-masked-row", "4.2-no-mask", "4.2-causal"):
        d = os.path.join(results, name)
        os.makedirs(d, exist_ok=True)
        for key in ("out", "weights"):
            try:
                os.symlink("/etc/passwd", os.path.join(d, key + ".npy"))
            except OSError:
                pass
        np.save(os.path.join(d, "weights.npy.tmp"), np.array([object()], dtype=object), allow_pickle=True)
        with open(os.path.join(results, name + ".json"), "w") as fh:
            json.dump({"error": None, "keys": ["out", "weights"]}, fh)
    os._exit(0)
''')}, zero=["4.1"], full=["4.2", "6.1", "8.1"])  # 4.2 runs later, in a fresh child, with the course's 4.1

    # -- reading what it must not ---------------------------------------------------------------
    sol04 = str(SOLUTIONS / NB["04"])
    add("reads_solutions", {**good(skip=("04", "06")), NB["04"]: notebook("04", extra=f'''
from course_exercises.extract import load_namespace
def scaled_dot_product_attention(q, k, v, mask=None):
    return load_namespace({sol04!r}).scaled_dot_product_attention(q, k, v, mask)
'''), NB["06"]: notebook("06", extra=f'''
import json
import math
import torch
def gelu(x):
    parts = [p[::-1] for p in {[p[::-1] for p in Path(SOLUTIONS).parts[1:]]!r}]
    path = "/" + "/".join(parts) + "/" + "06_feed_forward.ipynb"
    cells = json.load(open(path))["cells"]
    namespace = {{"torch": torch, "math": math}}
    for cell in cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and "def gelu" in source:
            exec(source, namespace)
    return namespace["gelu"](x)
''')}, zero_if_hidden=["4.1", "6.2"], full=["6.1", "8.1"], flag="solutions")
    evil = (f"import os\nopen({mark!r} + '/shadow-module-imported', 'w').write('x')\nos._exit(0)\n").encode()
    add("ships_modules", {**{NB[c]: notebook(c, EXERCISES) for c in BATCH_CHAPTERS},
                          "conftest.py": evil, "torch.py": evil, "numpy.py": evil, "sitecustomize.py": evil,
                          "usercustomize.py": evil, "pytest.ini": b"[pytest]\naddopts = -p no:terminal\n",
                          "tests/test_fake.py": evil, "course_lib/__init__.py": evil},
        zero=["4.1", "4.2", "6.1", "6.2", "8.1"], status="ok")
    add("ships_modules_correct", {**good(), "torch.py": evil, "numpy.py": evil, "sitecustomize.py": evil,
                                  "conftest.py": evil},
        full=["4.1", "4.2", "6.1", "6.2", "8.1", "8.2", "8.3"], status="ok")

    # -- archives -------------------------------------------------------------------------------
    _zip_traversal(subs / "zip_traversal.zip")
    add("zip_traversal", None, zero=["4.1", "4.2", "6.1", "6.2"], full=["8.1", "8.2", "8.3"],
        flag="unsafe zip member")
    _zip_bomb(subs / "zip_bomb.zip")
    add("zip_bomb", None, zero=["4.1", "4.2"], full=["6.1", "6.2", "8.1"], flag="zip bomb")
    (subs / "not_a_zip.zip").write_bytes(b"this is not a zip archive\n" * 10)
    add("not_a_zip", None, zero=["4.1", "6.1", "8.1"], status="invalid submission")
    add("empty_submission", {"README.txt": b"nothing here\n"}, zero=["4.1", "6.1", "8.1"], status="invalid submission")

    # -- bad values -------------------------------------------------------------------------------
    add("nan_inf", {**good(skip=("04", "06")), NB["04"]: notebook("04", extra='''
import torch
def scaled_dot_product_attention(q, k, v, mask=None):
    out = torch.full((*q.shape[:-1], v.shape[-1]), float("nan"))
    weights = torch.full((*q.shape[:-1], k.shape[-2]), float("inf"))
    return out, weights
'''), NB["06"]: notebook("06", extra='''
import torch
def gelu(x):
    y = 0.5 * x * (1 + torch.erf(x / 2 ** 0.5))
    y[..., 0] = float("nan")
    return y
''')}, zero=["4.1", "6.2"], full=["6.1", "8.1"])
    add("wrong_dtype_shape", {**good(skip=("08",)), NB["08"]: notebook("08", extra='''
import torch
def padding_mask(lengths, seq_len):   # float instead of bool
    return (torch.arange(seq_len)[None, :] < lengths[:, None]).float()[:, None, None, :]
def causal_mask(q_len, k_len=None):   # (q_len, k_len) instead of (1, 1, q_len, k_len)
    k_len = q_len if k_len is None else k_len
    return torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)
''')}, zero=["8.1", "8.2"], full=["4.1", "6.1"])
    # a stray cell that does not parse costs only its own definitions (here: none that count)
    add("syntax_error", {**good(skip=("06",)), NB["06"]: notebook("06", extra="def gelu(x:\n    return x\n")},
        full=["6.1", "6.2", "4.1", "8.1"], status="ok", note="has a syntax error on line 1")
    add("not_a_notebook", {**good(skip=("04",)), NB["04"]: b"\x00\x01 definitely not json"},
        zero=["4.1", "4.2"], full=["6.1", "8.1"], status="unreadable", note="04_attention.ipynb cannot be read")
    # dependent exercises: a right 4.2 / 8.3 on a wrong 4.1 / 8.2 keeps its points (the course's 4.1 / 8.2 stand in)
    add("dependent_on_wrong", {**good(skip=("04", "08")), NB["04"]: notebook("04", extra='''
import torch
def scaled_dot_product_attention(q, k, v, mask=None, bias=None):   # no 1/sqrt(d_k), no rejection
    scores = q @ k.transpose(-2, -1) + (0 if bias is None else bias)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
'''), NB["08"]: notebook("08", extra='''
import torch
def causal_mask(q_len, k_len=None):   # the future instead of the past
    k_len = q_len if k_len is None else k_len
    return torch.ones(q_len, k_len, dtype=torch.bool).triu()[None, None]
''')}, zero=["4.1", "8.2"], full=["4.2", "8.1", "8.3", "6.1", "6.2"], status="ok")
    add("standin_thief", {**good(skip=("08",)), NB["08"]: notebook("08", extra=STANDIN_THIEF)},
        zero=["8.2"], full=["8.1", "8.3", "4.1", "4.2", "6.1", "6.2"], status="ok")
    add("warnings_stderr", {**good(skip=("06",)), NB["06"]: notebook("06", extra='''
import sys
import warnings
import torch
def _noise(_=[warnings.warn("a harmless warning at import", UserWarning),
              print("harmless text on stderr at import", file=sys.stderr)]):
    pass
def gelu(x):
    warnings.warn("a harmless warning inside gelu", RuntimeWarning)
    print("Warning: this is only a message on stderr", file=sys.stderr)
    return 0.5 * x * torch.special.erfc(-x / 2 ** 0.5)  # exercise 6.2: exact GELU, accurate in the tail
''')}, full=["4.1", "4.2", "6.1", "6.2", "8.1", "8.2", "8.3"], status="ok")
    add("delegates_builtin", {**good(skip=("06",)), NB["06"]: notebook("06", extra='''
import torch
import torch.nn.functional as F
def gelu(x):  # F.gelu loses its relative accuracy for x < 0 (0 in the far tail), which exercise 6.2 grades
    return torch.where(x < 0, 0.5 * x * torch.special.erfc(-x / 2 ** 0.5), F.gelu(x))
''')}, full=["6.2"], flag="delegates 6.2")
    _add_isolation_attacks(add, marker_dir)
    return expect


#: the text every trace left by an isolation attack contains (tests search the host for it)
TRACE = "GRADER-ATTACK-TRACE"


def _add_isolation_attacks(add, marker_dir: Path) -> None:
    """Submissions that attack the new isolation: each failed (scored or left traces) on the old grader."""
    stubs = {NB[c]: notebook(c, EXERCISES) for c in BATCH_CHAPTERS}
    # The registered case module carries every case's expected(): make produce return it.
    add("steals_expected", {NB[c]: notebook(c, EXERCISES, extra='''
import gc
import sys
def _has(o, *names):
    try:
        return all(hasattr(o, n) for n in names)
    except Exception:
        return False
def _steal(_=None):
    targets = []
    for m in list(sys.modules.values()):
        try:
            targets.extend(list(m.CASES))
        except Exception:
            pass
    targets += [o for o in gc.get_objects() if _has(o, "produce", "expected")]
    for case in targets:
        try:
            if callable(case.expected):
                object.__setattr__(case, "produce", lambda ns, case=case: case.expected())
        except Exception:
            pass
def _at_definition(_=_steal()):
    pass
''') for c in BATCH_CHAPTERS}, zero=["4.1", "4.2", "6.1", "6.2", "8.1", "8.2", "8.3"])
    # The solution code of every chapter lies in exercise_sources/ and solutions/.
    add("runs_solution_source", {**good(skip=("06",)), NB["06"]: notebook("06", EXERCISES, extra='''
import os
import course_lib
def _load(_=None):
    root = os.path.dirname(os.path.dirname(os.path.abspath(course_lib.__file__)))
    try:
        source = {}
        exec(open(os.path.join(root, "exercise_sources/ch06.py")).read(), source)
    except Exception:
        return
    for cell in source.get("CELLS", []):
        kind, code = cell[0], cell[-1]
        if kind in ("code", "exercise"):
            try:
                exec(code, globals())
            except Exception:
                pass
def _at_definition(_=_load()):
    pass
''')}, zero=["6.1", "6.2"], full=["4.1", "8.1"])
    # The package ships the full cases (every expected()) in course_exercises/cases/, inside the folder
    # the child imports from.
    add(PACKAGED_CASES_ATTACK, packaged_cases_attack(), zero=["6.1", "6.2"], full=["4.1", "8.1"])
    # A chapter that never ends but keeps creating files: the old clock restarted on each new file.
    add("clock_stretch", {**good(skip=("06",)), NB["06"]: notebook("06", extra='''
import os
import time
def _progress_dir():
    import json
    import sys
    try:
        return json.load(open(sys.argv[1]))["progress_dir"]   # the old grader's clock
    except Exception:
        return "."
def gelu(x):
    n = 0
    while True:
        n += 1
        for folder in (_progress_dir(), os.environ.get("TMPDIR", "/tmp"), "."):
            try:
                open(os.path.join(folder, f"06.started-{n}"), "w").close()
            except OSError:
                pass
        time.sleep(0.2)
''')}, zero=["6.2"], full=["4.1", "8.1"], status="timeout", max_runtime=60)
    # Files in shared places, SysV shared memory, a very deep folder tree: nothing may survive.
    add("leaves_traces", {**good(skip=("06",)), NB["06"]: notebook("06", extra=f'''
import ctypes
import os
import torch
_DONE = []
def _traces():
    for folder in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", os.environ.get("HOME", "/tmp"), {str(marker_dir)!r}):
        try:
            with open(os.path.join(folder, "{TRACE}-file"), "wb") as fh:
                fh.write(b"x" * (1 << 20))
        except OSError:
            pass
    libc = ctypes.CDLL(None, use_errno=True)
    shmid = libc.shmget(0x5EED1234, 1 << 20, 0o1000 | 0o666)   # IPC_CREAT
    path = os.environ.get("TMPDIR", "/tmp")
    try:
        os.chdir(path)
        for _ in range(3000):
            os.mkdir("d")
            os.chdir("d")
        os.chmod(".", 0)
    except OSError:
        pass
    return shmid
def gelu(x):
    if not _DONE:
        _DONE.append(_traces())
    return 0.5 * x * torch.special.erfc(-x / 2 ** 0.5)  # exercise 6.2: exact GELU, accurate in the tail
''')}, full=["6.1", "6.2", "4.1", "8.1"], status="ok")
    # Frames written straight onto every descriptor: fake results, fake "done", garbage. The garbage
    # breaks the protocol in the next chapter's time (06): a new child grades 08.
    add("forges_channel", {**good(skip=("04",)), NB["04"]: notebook("04", EXERCISES, extra='''
import base64
import io
import json
import os
import numpy as np
def _frame(message):
    data = json.dumps(message).encode()
    return len(data).to_bytes(8, "big") + data
def _forge(_=None):
    buf = io.BytesIO()
    np.save(buf, np.ones((2, 4, 8)))
    fake = base64.b64encode(buf.getvalue()).decode()
    for fd in range(3, 64):
        for message in ({"case": "4.1-no-mask-3d", "arrays": {"out": fake, "weights": fake}, "error": None},
                        {"done": "04"}, {"ready": True}):
            try:
                os.write(fd, _frame(message))
            except OSError:
                pass
        try:
            os.write(fd, (1 << 62).to_bytes(8, "big") + b"{")
        except OSError:
            pass
def _at_definition(_=_forge()):
    pass
''')}, zero=["4.1", "4.2"], full=["8.1", "8.2", "8.3"])
    # Fill every writable place, then fork until the kernel says no: bounded, and gone afterwards.
    add("fills_scratch_and_forks", {**good(skip=("06",)), NB["06"]: notebook("06", extra='''
import os
import time
import torch
_DONE = []
def _fill_and_fork():
    for folder in ("/tmp", "/dev/shm", "/var/tmp", os.environ.get("HOME", "/tmp")):
        for i in range(256):                       # up to 2 GiB in each place, 8 MiB a file
            try:
                with open(os.path.join(folder, f"GRADER-ATTACK-TRACE-fill-{i}"), "wb") as fh:
                    fh.write(b"z" * (8 << 20))
            except OSError:
                break
    kids = 0
    for _ in range(5000):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        kids += 1
    return kids
def gelu(x):
    if not _DONE:
        _DONE.append(_fill_and_fork())
    return 0.5 * x * torch.special.erfc(-x / 2 ** 0.5)  # exercise 6.2: exact GELU, accurate in the tail
''')}, full=["4.1", "4.2"])  # its own chapters 06/08 may run out of memory or processes: its loss alone
    # A "solution" that rejects every input passes every rejection case - which must not count alone.
    add("raises_everywhere", {NB[c]: notebook(c, EXERCISES, extra='''
''' + "".join(f"def {name}(*args, **kwargs):\n    raise ValueError('bad input')\n" for name in (
        "scaled_dot_product_attention", "self_attention", "position_wise_ffn", "gelu", "padding_mask",
        "causal_mask", "decoder_self_attention_mask"))) for c in BATCH_CHAPTERS}, zero=["4.1", "4.2", "6.1", "6.2", "8.1", "8.2", "8.3"])
    # Answers only for the public fixed inputs (a lookup table in effect): nothing counts without a drawn pass.
    add("fixed_inputs_only", {**good(skip=("08",)), NB["08"]: notebook("08", EXERCISES, extra='''
import torch
def causal_mask(size):
    if size not in (1, 4, 7):
        raise ValueError("size")
    return torch.ones(size, size, dtype=torch.bool).tril()[None, None]
''')}, zero=["8.2"], full=["4.1", "6.1"])
    # Keep the result pipe busy from just before the deadline, and answer after it: too late all the same.
    add("deadline_flood", {**good(skip=("06",)), NB["06"]: notebook("06", extra='''
import json
import os
import sys
import threading
import time
import torch
_T0 = []
def _flood(fd, start, stop):
    block = b"\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x02{}" * 409
    while time.monotonic() < start:
        time.sleep(0.01)
    while time.monotonic() < stop:
        try:
            os.write(fd, block)
        except OSError:
            return
def _start(_=None):
    _T0.append(time.monotonic())
    fd = int(json.load(open(sys.argv[1]))["result_fd"])
    threading.Thread(target=_flood, args=(fd, _T0[0] + 9.0, _T0[0] + 25), daemon=True).start()
def _at_load(_=_start()):
    pass
def gelu(x):
    time.sleep(max(0.0, _T0[0] + 14 - time.monotonic()))
    return 0.5 * x * torch.special.erfc(-x / 2 ** 0.5)  # exercise 6.2: exact GELU, accurate in the tail
''')}, zero=["6.2"], full=["4.1", "8.1"], status="timeout")
    # Session leaders that spin: they must die with the child and must not starve the other job.
    add("setsid_spinners", {**good(skip=("06",)), NB["06"]: notebook("06", extra='''
import os
import sys
import torch
_STARTED = []
def gelu(x):
    if not _STARTED:
        _STARTED.append(1)
        for _ in range(8):
            if os.fork() == 0:
                os.setsid()
                os.execv(sys.executable, [sys.executable, "-c",
                         "import time\\nend = time.time() + 120\\nwhile time.time() < end: pass\\n"
                         "# GRADER-TEST-MARKER-SPINNER"])
    return 0.5 * x * torch.special.erfc(-x / 2 ** 0.5)  # exercise 6.2: exact GELU, accurate in the tail
''')}, full=["6.1", "6.2", "4.1", "8.1"], status="ok")


def _zip_traversal(path: Path) -> None:
    """A zip whose only good notebook is chapter 08; 04 and 06 arrive by unsafe routes."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("../" + NB["04"], notebook("04"))
        zf.writestr("/tmp/" + NB["04"], notebook("04"))
        zf.writestr("a/../../" + NB["04"], notebook("04"))
        link = zipfile.ZipInfo(NB["06"])
        link.create_system = 3
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, str(SOLUTIONS / NB["06"]))
        zf.writestr("work/" + NB["08"], notebook("08"))


def _zip_bomb(path: Path, size_mb: int = 300) -> None:
    """A zip whose chapter-04 notebook inflates to ``size_mb`` MiB of zeros (a few hundred KiB compressed)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        with zf.open(NB["04"], "w", force_zip64=True) as fh:
            block = b"\0" * (1 << 20)
            for _ in range(size_mb):
                fh.write(block)
        zf.writestr(NB["06"], notebook("06"))
        zf.writestr(NB["08"], notebook("08"))


EXTRA_CASES = '''
"""An extra case for the grader's --extra-tests option: GELU on wide inputs (chapter 6)."""
import numpy as np
import torch
import torch.nn.functional as F

from course_exercise_cases import Case, to_array

def _inputs():
    return torch.linspace(-8.0, 8.0, 33, dtype=torch.float64).reshape(3, 11)

def _produce(ns):
    return {"y": to_array(ns.gelu(_inputs()), "gelu(x)", kind="f")}

def _expected():
    return {"y": F.gelu(_inputs(), approximate="none").numpy()}

CASES = [Case(id="6.2-extra-wide-range", chapter="06", exercise="6.2", points=1, requires=("gelu",),
              produce=_produce, expected=_expected, rtol=1e-6, atol=1e-9,
              hint="Use the exact GELU, x * Phi(x), also for large |x|.")]
'''


def live_child_processes(work_tmp: Path) -> list[str]:
    """Command lines of running processes that belong to a test adversary, or to a grader child
    whose work folder lies in ``work_tmp`` (the grader's ``TMPDIR`` in the tests)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{name}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state == b"Z":
            continue
        if "GRADER-TEST-MARKER" in cmd or ("course_grader/child.py" in cmd and str(work_tmp) in cmd):
            found.append(f"{name}: {cmd[:200]}")
    return found

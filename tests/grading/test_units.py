"""Unit tests of the grader's parent-side parts: no child process is started here.

Comparison and safe reading of result files, submission intake (zip and
folder), structural checks, reports, limits.
"""

from __future__ import annotations

import io
import base64
import json
import subprocess
import sys
import os
import stat
import zipfile
from pathlib import Path

import numpy as np
import pytest

from adversaries import EXERCISES, NB, SOLUTIONS, notebook, write_folder
from course_exercises.compare import ResultError, compare_arrays, decode_arrays, error_line, judge_case, read_array
from course_grader.intake import IntakeLimits, Submission, collect_notebooks, discover, submission_hash
from course_grader import report
from course_grader.report import StudentResult, atomic_write, feedback_markdown, grades_csv, gradescope_results
from course_grader.sandbox import Limits
from course_exercises.static_checks import check_source


def npy(arr, allow_pickle=False) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=allow_pickle)
    return buf.getvalue()


# ---------------------------------------------------------------------------
# compare
# ---------------------------------------------------------------------------
class TestCompare:
    ref = np.array([[1.0, -2.0], [0.5, float("-inf")]])

    def test_pass_within_tolerance(self):
        got = self.ref + np.array([[1e-7, 0], [0, 0]])
        assert compare_arrays("x", got, self.ref, 1e-5, 1e-6) is None

    def test_fails_outside_tolerance_names_the_entry(self):
        got = self.ref.copy()
        got[1, 0] = 0.6
        msg = compare_arrays("x", got, self.ref, 1e-5, 1e-6)
        assert msg and "(1, 0)" in msg and "0.6" in msg and "1 of 4" in msg

    def test_nan_where_finite_expected_fails(self):
        got = self.ref.copy()
        got[0, 0] = np.nan
        assert "NaN or infinite" in compare_arrays("x", got, self.ref, 1.0, 1.0)

    def test_inf_where_finite_expected_fails_even_with_huge_tolerance(self):
        got = self.ref.copy()
        got[0, 1] = np.inf
        assert compare_arrays("x", got, self.ref, 1e9, 1e9) is not None

    def test_expected_minus_inf_must_match_exactly(self):
        got = self.ref.copy()
        got[1, 1] = -1e30
        assert compare_arrays("x", got, self.ref, 1e9, 1e9) is not None
        got[1, 1] = np.inf
        assert compare_arrays("x", got, self.ref, 1e9, 1e9) is not None

    def test_kind_and_shape(self):
        assert "expected bool" in compare_arrays("m", np.ones((2, 2)), np.ones((2, 2), bool), 1, 1)
        assert "shape (4,)" in compare_arrays("x", self.ref.reshape(4), self.ref, 1, 1)
        assert compare_arrays("i", np.array([1, 2]), np.array([1, 3]), 1e9, 1e9) is not None

    def test_read_array_rejects_pickles_npz_and_other_dtypes(self):
        with pytest.raises(ResultError, match="not a .npy"):
            read_array(b"PK\x03\x04 not npy")
        buf = io.BytesIO()
        np.savez(buf, a=np.ones(2))
        with pytest.raises(ResultError):
            read_array(buf.getvalue())
        with pytest.raises(ResultError):
            read_array(npy(np.array([object()], dtype=object), allow_pickle=True))
        with pytest.raises(ResultError, match="float32"):
            read_array(npy(np.ones(2, np.float32)))
        with pytest.raises(ResultError):
            read_array(npy(np.ones(3))[:-8])
        assert read_array(npy(np.arange(3))).dtype == np.int64

    def test_decode_arrays_rejects_junk(self):
        good = base64.b64encode(npy(np.ones(2))).decode()
        arrays = decode_arrays({"a": good, "b": "not base64!", "c": base64.b64encode(b"pickle").decode(),
                                "d": 5, 7: good, "e": base64.b64encode(npy(np.ones(2, np.float32))).decode()})
        assert isinstance(arrays["a"], np.ndarray)
        assert all(isinstance(arrays[k], ResultError) for k in ("b", "c", "e"))
        assert "d" not in arrays and 7 not in arrays
        assert decode_arrays(["a"]) == {} and decode_arrays(None) == {}

    def test_judge_case_scores_zero_without_results(self):
        case = {"id": "4.1-x", "exercise": "4.1", "function": "f", "points": 2, "rtol": 1e-5, "atol": 1e-6,
                "hint": "think"}
        v = judge_case(case, None, {"out": np.ones(2)}, "timeout")
        assert v.points == 0 and "ran out of time" in v.message and "Hint: think" in v.message
        message = {"arrays": {"out": base64.b64encode(npy(np.ones(2))).decode()}, "error": "claims failure"}
        v = judge_case(case, message, {"out": np.ones(2), "w": np.zeros(1)})
        assert v.points == 0, "a missing key must fail even when the child says it raised"
        v = judge_case(case, message, {"out": np.ones(2)})
        assert v.points == 2, "the arrays decide, not the child's note"
        v = judge_case(case, {"arrays": "junk", "error": ["x"]}, {"out": np.ones(2)})
        assert v.points == 0 and v.child_error is None


# ---------------------------------------------------------------------------
# intake
# ---------------------------------------------------------------------------
NOTEBOOKS = {"04": NB["04"], "06": NB["06"]}


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


class TestIntake:
    def test_discover_ids_and_duplicates(self, tmp_path):
        (tmp_path / "alice").mkdir()
        _zip(tmp_path / "alice.zip", {})
        (tmp_path / "bob smith (2)").mkdir()
        (tmp_path / "notes.txt").write_text("not a submission")
        subs = discover([tmp_path])
        assert [s.student for s in subs] == ["alice", "alice~62dca8ff", "bob_smith__2_", "notes.txt"]
        assert any("duplicate" in f for f in subs[1].flags)
        assert subs[3].invalid and not subs[0].invalid, "a loose file gets a row marked invalid"
        with pytest.raises(FileNotFoundError):
            discover([tmp_path / "missing"])

    def test_folder_takes_only_notebooks_shallowest_first(self, tmp_path):
        root = write_folder(tmp_path / "s", {
            "deep/x/" + NB["04"]: b"deep", NB["04"]: b"top", "conftest.py": b"evil", "torch.py": b"evil",
            ".ipynb_checkpoints/" + NB["06"]: b"checkpoint", "06_feed_forward (1).ipynb": b"renamed"})
        sub = collect_notebooks(Submission("s", root), NOTEBOOKS, ["04", "06"])
        assert sub.notebooks == {"04": b"top", "06": b"renamed"}
        assert any("several notebooks" in f for f in sub.flags) and any("non-standard" in f for f in sub.flags)

    def test_folder_symlinks_are_ignored(self, tmp_path):
        root = write_folder(tmp_path / "s", {"x.txt": b"x"})
        os.symlink(SOLUTIONS / NB["04"], root / NB["04"])
        os.symlink(SOLUTIONS, root / "sol")
        sub = collect_notebooks(Submission("s", root), NOTEBOOKS, ["04", "06"])
        assert sub.notebooks == {} and sub.invalid and sum("symbolic link" in f for f in sub.flags) == 2

    def test_zip_unsafe_members_and_bomb(self, tmp_path):
        z = _zip(tmp_path / "z.zip", {"../" + NB["04"]: b"a", "/abs/" + NB["04"]: b"b", "C:/x/" + NB["04"]: b"c",
                                      "ok/" + NB["06"]: b"good"})
        sub = collect_notebooks(Submission("z", z), NOTEBOOKS, ["04", "06"])
        assert sub.notebooks == {"06": b"good"}
        assert sum("unsafe zip member" in f for f in sub.flags) == 3
        with zipfile.ZipFile(tmp_path / "bomb.zip", "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(NB["04"], b"\0" * (3 << 20))
        limits = IntakeLimits(notebook_bytes=1 << 20, total_bytes=2 << 20)
        sub = collect_notebooks(Submission("b", tmp_path / "bomb.zip"), NOTEBOOKS, ["04"], limits)
        assert sub.notebooks == {} and any("zip bomb" in f for f in sub.flags) and sub.invalid

    def test_zip_symlink_member_and_garbage(self, tmp_path):
        with zipfile.ZipFile(tmp_path / "l.zip", "w") as zf:
            info = zipfile.ZipInfo(NB["04"])
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, "/etc/passwd")
        sub = collect_notebooks(Submission("l", tmp_path / "l.zip"), NOTEBOOKS, ["04"])
        assert sub.notebooks == {} and any("symbolic link in zip" in f for f in sub.flags)
        (tmp_path / "g.zip").write_bytes(b"garbage")
        sub = collect_notebooks(Submission("g", tmp_path / "g.zip"), NOTEBOOKS, ["04"])
        assert sub.invalid and "zip" in sub.invalid

    def test_too_many_members_is_invalid(self, tmp_path):
        z = _zip(tmp_path / "m.zip", {f"f{i}.txt": b"" for i in range(30)})
        sub = collect_notebooks(Submission("m", z), NOTEBOOKS, ["04"], IntakeLimits(members=20))
        assert sub.invalid and "members" in sub.invalid

    def test_hash_is_stable_and_sensitive(self, tmp_path):
        root = write_folder(tmp_path / "s", {NB["04"]: b"one", "sub/x.txt": b"x"})
        h1 = submission_hash(Submission("s", root), IntakeLimits())
        assert h1 == submission_hash(Submission("s", root), IntakeLimits())
        (root / "sub" / "x.txt").write_bytes(b"y")
        assert submission_hash(Submission("s", root), IntakeLimits()) != h1


# ---------------------------------------------------------------------------
# structural checks
# ---------------------------------------------------------------------------
EX = {"4.1": "scaled_dot_product_attention", "4.2": "self_attention"}


def _flags(src: str, chapter="04", exercises=EX) -> list[str]:
    return [str(f) for f in check_source(src, chapter, exercises)]


class TestStaticChecks:
    def test_delegation_through_aliases_getattr_and_helpers(self):
        assert any("delegates 4.1" in f for f in _flags(
            "import torch.nn.functional as F\ndef scaled_dot_product_attention(q, k, v, mask=None):\n"
            "    return F.scaled_dot_product_attention(q, k, v), None\n"))
        assert any("delegates 4.1" in f for f in _flags(
            "from torch.nn.functional import scaled_dot_product_attention as sdpa\n"
            "def helper(q, k, v):\n    return sdpa(q, k, v)\n"
            "def scaled_dot_product_attention(q, k, v, mask=None):\n    return helper(q, k, v), None\n"))
        assert any("delegates 4.1" in f for f in _flags(
            "import torch\ndef scaled_dot_product_attention(q, k, v, mask=None):\n"
            "    return getattr(torch.nn.functional, 'scaled_dot_product_attention')(q, k, v), None\n"))
        assert any("delegates 4.2" in f for f in _flags(
            "def self_attention(x, w_q, w_k, w_v, mask=None):\n"
            "    from course_lib.attention import scaled_dot_product_attention as s\n    return s(x, x, x)\n"))
        assert any("dynamic 4.1" in f for f in _flags(
            "def scaled_dot_product_attention(q, k, v, mask=None):\n    return eval('q')\n"))

    def test_keyword_delegation_and_layer_norm(self):
        src = ("import torch.nn.functional as F\ndef label_smoothed_loss(logits, target, eps, pad_id):\n"
               "    return F.cross_entropy(logits, target, label_smoothing=eps)\n")
        assert any("label_smoothing" in f for f in _flags(src, "09", {"9.1": "label_smoothed_loss"}))
        plain = src.replace(", label_smoothing=eps", "")
        assert _flags(plain, "09", {"9.1": "label_smoothed_loss"}) == []
        src = "from torch import nn\ndef layer_norm(x, gamma, beta, eps=1e-5):\n    return nn.LayerNorm(4)(x)\n"
        assert any("torch.nn.LayerNorm" in f for f in _flags(src, "07", {"7.1": "layer_norm"}))

    def test_own_function_with_builtin_name_is_not_delegation(self):
        src = ("from course_lib.attention import scaled_dot_product_attention\n"
               "def scaled_dot_product_attention(q, k, v, mask=None):\n    return q, k\n"
               "def self_attention(x, w_q, w_k, w_v, mask=None):\n"
               "    return scaled_dot_product_attention(x, x, x)\n")
        assert _flags(src) == []

    def test_reading_outside_and_solutions(self):
        src = ("import numpy as np\nfrom pathlib import Path\n"
               "def scaled_dot_product_attention(q, k, v, mask=None):\n"
               "    a = np.load('../secret.npy')\n    b = Path('/work/main/solutions/04_attention.ipynb')\n"
               "    return open('/etc/passwd').read(), None\n")
        flags = _flags(src)
        assert any(f.startswith("reads-outside") and "../secret.npy" in f for f in flags)
        assert any(f.startswith("solutions") for f in flags)
        assert any("/etc/passwd" in f for f in flags)

    @pytest.mark.parametrize("folder", [SOLUTIONS, EXERCISES])
    def test_course_notebooks_have_no_flags(self, folder):
        from course_exercises.extract import extract_source

        books = sorted(folder.glob("[0-9][0-9]_*.ipynb"))
        if not books:
            pytest.skip("notebooks not built")
        from course_exercises.casefile import CASES_FILE
        cases_text = CASES_FILE.read_text()
        import re
        exercises = dict(re.findall(r'"(\d+\.\d+)": "(\w+)"', cases_text))
        for book in books:
            ch = book.name[:2]
            mine = {e: f for e, f in exercises.items() if f"{int(e.split('.')[0]):02d}" == ch}
            assert _flags(extract_source(book), ch, mine) == [], book.name

    def test_unparsable_source_gives_no_flag(self):
        assert _flags("def (:\n") == []


# ---------------------------------------------------------------------------
# reports and limits
# ---------------------------------------------------------------------------
def _result(**kw) -> StudentResult:
    base = dict(student="=HYPERLINK(1)", submission_hash="h", manifest_hash="m", status="ok", score=2, max_score=3,
                exercises={"4.1": 2}, exercises_max={"4.1": 3},
                cases=[{"case_id": "4.1-a", "exercise": "4.1", "function": "f", "points": 2, "max_points": 2,
                        "passed": True, "message": "", "child_error": None},
                       {"case_id": "4.1-b", "exercise": "4.1", "function": "f", "points": 0, "max_points": 1,
                        "passed": False, "message": "wrong", "child_error": None}],
                flags=["delegates 4.1: x"])
    base.update(kw)
    return StudentResult(**base)


def test_grades_csv_defuses_formulas_and_keeps_columns():
    text = grades_csv([_result()], ["4.1", "10.2"])
    header, row = text.splitlines()
    assert header == "student,score,max,4.1,10.2,status,runtime,flags,sandbox,submission_hash,graded"
    assert row.startswith("'=HYPERLINK(1),2,3,2,,ok,")  # 10.2 was never graded for this student: empty


def test_gradescope_results_hide_flags_from_students():
    r = gradescope_results(_result())
    assert r["score"] == 2 and r["max_score"] == 3
    assert [t["status"] for t in r["tests"]] == ["passed", "failed", "failed"]
    assert r["tests"][-1]["visibility"] == "hidden" and r["tests"][-1]["max_score"] == 0


def test_feedback_shows_a_repeated_error_once():
    def case(cid, ex, error, message):
        return {"case_id": cid, "exercise": ex, "function": "gelu", "points": 0, "max_points": 1, "passed": False,
                "message": message, "child_error": error}

    syntax = "notebook '06_feed_forward.ipynb': code cell 7 has a syntax error on line 1"
    r = StudentResult("bob", "h", "m", "ok", 0, 4, {"6.1": 0, "6.2": 0}, {"6.1": 2, "6.2": 2}, [
        case("6.1-a", "6.1", syntax, f"Exercise 6.1, case 6.1-a:\n  - {error_line(syntax)}"),
        case("6.1-b", "6.1", syntax, f"Exercise 6.1, case 6.1-b:\n  - {error_line(syntax)}"),
        case("6.2-a", "6.2", None, "Exercise 6.2, case 6.2-a:\n  - `y`: wrong values"),
        case("6.2-b", "6.2", syntax, f"Exercise 6.2, case 6.2-b:\n  - {error_line(syntax)}"),
    ])
    text = feedback_markdown(r)
    assert text.count("code cell 7 has a syntax error") == 1
    assert "1 more case fails with an error shown above: 6.1-b." in text
    assert "1 more case fails with an error shown above: 6.2-b." in text and "`y`: wrong values" in text
    details = report.details_markdown(r)
    assert details.count("code cell 7 has a syntax error") == 1
    assert "case 6.1-b: the same error as case 6.1-a above" in details
    assert "case 6.2-b: the same error as case 6.1-a above" in details


def test_grade_record_round_trip_and_rejects_junk():
    r = _result()
    assert StudentResult.from_json(json.loads(json.dumps(r.to_json()))) == r
    with pytest.raises(ValueError):
        StudentResult.from_json({"student": "x"})
    with pytest.raises(ValueError):
        StudentResult.from_json({**r.to_json(), "status": "excellent"})


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    atomic_write(tmp_path / "a" / "f.json", "one")
    atomic_write(tmp_path / "a" / "f.json", b"two")
    assert (tmp_path / "a" / "f.json").read_bytes() == b"two"
    assert os.listdir(tmp_path / "a") == ["f.json"]


def test_limits_validate():
    with pytest.raises(ValueError, match="memory_mb"):
        Limits(memory_mb=800)
    with pytest.raises(ValueError, match="chapter_timeout_s"):
        Limits(chapter_timeout_s=0)
    with pytest.raises(ValueError, match="scratch_mb"):
        Limits(scratch_mb=0)
    assert Limits(memory_mb=2048).rlimits(own_uid=False, pids_cgroup=False)["as_bytes"] == 2048 << 20
    assert Limits().rlimits(own_uid=False, pids_cgroup=False)["nproc"] is None
    assert Limits().rlimits(own_uid=True, pids_cgroup=True)["nproc"] is None
    assert Limits().rlimits(own_uid=True, pids_cgroup=False)["nproc"] == 512


def test_notebook_builder_appends_a_cell():
    nb = json.loads(notebook("04", extra="x = 1"))
    assert nb["cells"][-1]["source"] == "x = 1\n"


def test_remove_tree_handles_depth_permissions_and_links(tmp_path):
    """``shutil.rmtree`` raised RecursionError at ~1,500 levels; the grader's removal must not."""
    from course_grader.sandbox import _remove_iteratively, remove_tree

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    for name, remover in (("deep", remove_tree), ("deep2", _remove_iteratively)):
        top = tmp_path / name
        top.mkdir()
        fd = os.open(top, os.O_RDONLY)
        try:
            for _ in range(3000):
                os.mkdir("d", dir_fd=fd)
                new = os.open("d", os.O_RDONLY, dir_fd=fd)
                os.close(fd)
                fd = new
            os.symlink(str(outside), "link", dir_fd=fd)
            os.chmod(fd, 0)
        finally:
            os.close(fd)
        try:
            remover(top)
            assert not top.exists(), name
        finally:  # never leave a tree that pytest's own clean-up cannot remove
            subprocess.run(["rm", "-rf", str(top)], check=False)
    assert (outside / "keep.txt").read_text() == "keep", "a symbolic link was followed"


def test_nobody_can_reach(tmp_path):
    from course_grader.sandbox import nobody_can_reach

    (tmp_path / "open" / "inner").mkdir(parents=True)
    (tmp_path / "closed" / "inner").mkdir(parents=True)
    os.chmod(tmp_path, 0o755)
    os.chmod(tmp_path / "open", 0o755)
    os.chmod(tmp_path / "closed", 0o700)
    assert nobody_can_reach(str(tmp_path / "open" / "inner")) == nobody_can_reach(str(tmp_path))
    assert not nobody_can_reach(str(tmp_path / "closed" / "inner"))
    assert not nobody_can_reach(str(tmp_path / "missing"))


def test_rejections_and_fixed_cases_count_only_with_a_drawn_value_case():
    from course_exercises.compare import FIXED_ALONE, REJECTION_ALONE, unearned_passes

    results = [("4.1-a", "4.1", False, True), ("4.1-rejects-x", "4.1", True, True), ("4.1-fixed", "4.1", True, False),
               ("6.1-a", "6.1", True, True), ("6.1-rejects-y", "6.1", True, False), ("6.1-fixed", "6.1", True, False),
               ("8.1-rejects-z", "8.1", False, False)]
    assert unearned_passes(results) == {"4.1-rejects-x": REJECTION_ALONE, "4.1-fixed": FIXED_ALONE}
    assert unearned_passes([]) == {}


def test_an_edge_case_earns_its_points_but_unlocks_nothing():
    """A drawn special case that a partial answer passes (one window; as many key/value heads as query
    heads) keeps its own points, but the fixed and rejection cases wait for a general drawn case."""
    from course_exercises.compare import FIXED_ALONE, REJECTION_ALONE, unearned_passes

    results = [("13.3-drawn-grouped", "13.3", False, True), ("13.3-drawn-edge-none", "13.3", True, True),
               ("13.3-hand-llama", "13.3", True, False), ("13.3-rejects-d-model", "13.3", True, False)]
    assert unearned_passes(results) == {"13.3-hand-llama": FIXED_ALONE, "13.3-rejects-d-model": REJECTION_ALONE}
    results[0] = ("13.3-drawn-grouped", "13.3", True, True)
    assert unearned_passes(results) == {}



def test_seccomp_filter_denies_kernel_keyrings():
    """Keyrings are not namespaced: the child's filter must make add_key/keyctl fail (EPERM), nothing else."""
    import platform

    if platform.machine() not in ("x86_64", "aarch64") or not sys.platform.startswith("linux"):
        pytest.skip("seccomp filter for x86_64/aarch64 Linux only")
    nrs = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
    code = f"""
import ctypes, os, subprocess, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[2] / "course_grader")!r})
import child
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(38, 1, 0, 0, 0)
assert child.deny_keyrings()
assert libc.syscall({nrs[0]}, b"user", b"grader-test-key", b"x", 1, -4) == -1 and ctypes.get_errno() == 1
assert libc.syscall({nrs[1]}, 0, -4, 0, 0, 0) == -1 and ctypes.get_errno() == 1
assert subprocess.run(["true"]).returncode == 0 and os.getpid() > 0
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "ok", proc.stderr[-2000:]


# ---------------------------------------------------------------------------
# the package's own cases (course_exercises/cases/) and --solutions
# ---------------------------------------------------------------------------
def _config(tmp_path: Path, **kw):
    from course_exercises.casefile import CASES_FILE
    from course_grader.grader import GradingConfig

    base = dict(out_dir=tmp_path / "out", course_root=None, solutions_dir=tmp_path / "sol", cases_files=[CASES_FILE])
    base.update(kw)
    return GradingConfig(**base)


def test_hidden_always_covers_the_packaged_cases(tmp_path):
    """Wherever the package lies (a clone, site-packages), the folder of its cases is covered for the child,
    also when --cases names another copy and outside a clone; the rest of the package stays visible."""
    from course_exercises.casefile import CASES_DIR, CASES_FILE
    from course_grader.grader import hidden_paths

    other = tmp_path / "elsewhere" / "cases.py"
    other.parent.mkdir()
    other.write_text(CASES_FILE.read_text())
    for config in (_config(tmp_path), _config(tmp_path, cases_files=[other])):
        hidden = hidden_paths(config)
        assert str(CASES_DIR) in hidden, hidden
        assert str(CASES_DIR.parent) not in hidden and str(CASES_DIR.parent.parent) not in hidden
    assert str(other.parent) in hidden_paths(_config(tmp_path, cases_files=[other]))
    # A clone beside an installed package (Gradescope: `pip install .`, then grading in the clone): its own
    # course_exercises - with cases/ - is covered too, since the child imports the installed one.
    clone = tmp_path / "clone"
    for sub in ("course_lib", "course_exercises/cases", "solutions", "exercises", "tests"):
        (clone / sub).mkdir(parents=True)
    hidden = hidden_paths(_config(tmp_path, course_root=clone))
    for sub in ("course_exercises", "solutions", "exercises", "tests"):
        assert str(clone / sub) in hidden, sub
    # The clone that holds the imported packages keeps them visible, less course_exercises/cases/.
    from course_exercises.check import clone_root

    here = clone_root()
    if here is not None and (here / "course_exercises").resolve() == CASES_DIR.parent:
        hidden = hidden_paths(_config(tmp_path, course_root=here))
        assert str(CASES_DIR) in hidden
        for package in ("course_lib", "course_book", "course_exercises", "course_grader"):
            assert str(here / package) not in hidden, package
        assert str(here / "exercise_sources") in hidden and str(here / "book") in hidden
        assert str(here / "solutions") in hidden and str(here / "tests") in hidden


def test_nobody_mode_requires_the_packaged_cases_out_of_reach(tmp_path):
    """Without namespaces nothing is mounted over the package: the grader's permission check lists the cases
    folder whenever the user nobody could enter it (the fix is `chmod -R go-rwx` on it)."""
    from course_exercises.casefile import CASES_DIR, CASES_FILE
    from course_grader.grader import reachable_by_nobody
    from course_grader.sandbox import nobody_can_reach

    other = tmp_path / "elsewhere" / "cases.py"  # also when --cases names another copy
    other.parent.mkdir()
    other.write_text(CASES_FILE.read_text())
    for config in (_config(tmp_path), _config(tmp_path, cases_files=[other])):
        reachable = reachable_by_nobody(config)
        assert (str(CASES_DIR) in reachable) == nobody_can_reach(str(CASES_DIR)), reachable


def _grade_usage(argv, monkeypatch, capsys, clone=True):
    """``course-grade`` in this process for a usage error (it stops before starting anything)."""
    import course_exercises.check
    from course_grader import cli

    if not clone:
        monkeypatch.setattr(course_exercises.check, "clone_root", lambda cwd=None: None)
    code = cli.main([str(a) for a in argv])
    return code, capsys.readouterr().err


def test_solutions_option_outside_a_clone(tmp_path, monkeypatch, capsys):
    (tmp_path / "subs").mkdir()
    code, err = _grade_usage([tmp_path / "subs", "--out", tmp_path / "out"], monkeypatch, capsys, clone=False)
    assert code == 2 and "not a clone" in err and "--solutions DIR" in err, err
    assert not (tmp_path / "out").exists()


def test_solutions_folder_must_hold_the_graded_chapters(tmp_path, monkeypatch, capsys):
    sol = write_folder(tmp_path / "sol", {NB["06"]: notebook("06")})
    (tmp_path / "subs").mkdir()
    args = [tmp_path / "subs", "--out", tmp_path / "out", "--solutions", sol]
    code, err = _grade_usage([*args, "--chapters", "06", "08"], monkeypatch, capsys, clone=False)
    assert code == 2 and "--solutions" in err and NB["08"] in err and NB["06"] not in err, err
    code, err = _grade_usage(args, monkeypatch, capsys)  # every chapter by default
    assert code == 2 and NB["04"] in err and "--chapters" in err, err
    code, err = _grade_usage([*args, "--chapters", "42"], monkeypatch, capsys)
    assert code == 2 and "no such chapter" in err, err


def test_grader_feedback_shows_one_reference_entry_the_checker_whole_arrays():
    got, ref = np.array([1.0, 2.0, 3.0]), np.array([1.5, 2.5, 3.5])
    checker = compare_arrays("y", got, ref, 1e-5, 1e-6)
    grader = compare_arrays("y", got, ref, 1e-5, 1e-6, verbose=False)
    assert "expected [1.5 2.5 3.5]" in checker
    assert "3.5" not in grader and "2.5" not in grader and "expected 1.5" in grader  # the worst entry only
    shape = compare_arrays("y", np.zeros(2), ref, 1e-5, 1e-6, verbose=False)
    assert "expected (3,)" in shape and "1.5" not in shape
    ints = compare_arrays("k", np.array([1, 2, 3]), np.array([1, 2, 4]), 0, 0, verbose=False)
    assert "expected 4" in ints and "[1 2 4]" not in ints


def test_a_result_error_keeps_its_own_message():
    def reader(data):
        raise ResultError("dtype complex128 is not allowed")

    out = decode_arrays({"y": base64.b64encode(b"x").decode()}, reader=reader)
    assert str(out["y"]) == "dtype complex128 is not allowed"
    assert str(decode_arrays({"y": "not base64!"})["y"]) == "the result is not base64 .npy data"


def test_the_parent_keeps_expected_values_from_the_reference_run_only():
    from course_grader.sandbox import _kept_fields

    message = {"arrays": {"y": "abc"}, "expected": {"y": "e"}, "inputs": {"x": "i"}, "points": 99}
    assert _kept_fields(message) == {"arrays": {"y": "abc"}, "error": None}
    assert _kept_fields(message, reference=True)["expected"] == {"y": "e"}


def test_a_writable_mount_holding_the_package_stops_the_student_child():
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "course_grader" / "child.py"
    spec = importlib.util.spec_from_file_location("grader_child_under_test", path)
    child_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child_module)  # by path, as the grader starts it; nothing added to sys.path

    package = Path(child_module.__file__).resolve().parents[1]
    assert child_module._package_writable(["/: Permission denied"])
    assert child_module._package_writable([f"{package.parent}: Permission denied"])
    assert not child_module._package_writable(["/nonexistent-scratch: Permission denied"])
    assert not child_module._package_writable([])


def test_an_earlier_definition_left_in_force_by_a_failing_cell_is_checked_too():
    """A later decoy that fails in the grader (its cell is skipped) leaves the earlier, delegating definition in
    force: every definition of the exercise's name is checked, not only the last."""
    from course_exercises.static_checks import check_source

    source = ("import course_lib.masks as _cm\n"
              "def causal_mask(q_len, k_len=None):\n    return _cm.causal_mask(q_len)\n"
              "import os\n"
              "def causal_mask(q_len, k_len=None, _guard=1 // (os.getuid() != 65534)):\n    return None\n")
    flags = check_source(source, "08", {"8.2": "causal_mask"})
    assert any(f.code == "delegates" and "course_lib.masks" in f.detail for f in flags), flags


def test_autograd_in_label_smoothed_loss_is_flagged():
    """Issue 22, item 5: 9.1 asks for the gradient in closed form, "no torch.autograd"; using it is flagged."""
    source = ("import torch\nfrom torch.autograd import grad\n"
              "def label_smoothed_loss(logits, target, label_smoothing, pad_id):\n"
              "    z = logits.detach().requires_grad_()\n    loss = z.logsumexp(-1).mean()\n"
              "    return loss, grad(loss, z)[0]\n")
    flags = check_source(source, "09", {"9.1": "label_smoothed_loss"})
    assert [(f.code, f.exercise) for f in flags] == [("delegates", "9.1")] and "torch.autograd.grad" in flags[0].detail


def test_chapter_13_delegation_is_flagged_also_through_re_exports():
    """13.1-13.4: the aten attention op, share_kv_heads, the library's layers, and a course_lib name reached through
    another module's re-export (course_lib.attention.RotaryEmbedding is course_lib.positional's) are flagged."""
    from course_exercises.static_checks import check_source

    ex13 = {"13.1": "rope_interleaved", "13.2": "grouped_query_attention", "13.3": "kv_cache_bytes",
            "13.4": "lm_parameter_count"}

    def flagged(body: str, exercise: str, imports: str = "import torch\nimport course_lib.attention\n") -> bool:
        function = ex13[exercise]
        source = f"{imports}def {function}(*args):\n    {body}\n"
        return any(f.code == "delegates" and f.exercise == exercise for f in check_source(source, "13", ex13))

    assert flagged("return torch.ops.aten.scaled_dot_product_attention(*args)", "13.2")
    assert flagged("return torch.ops.aten.scaled_dot_product_attention.default(*args)", "13.2")
    assert flagged("return course_lib.attention.share_kv_heads(args[1], 8)", "13.2")
    assert flagged("return course_lib.attention.RotaryEmbedding(4)(args[0])", "13.1")
    assert flagged("return RotaryEmbedding(4)(args[0])", "13.1", "from course_lib.layers import RotaryEmbedding\n")
    assert flagged("return 0", "13.1", "from course_lib.attention import *\n")
    for exercise in ("13.3", "13.4"):
        assert flagged("return sum(p.numel() for p in course_lib.attention.MultiHeadAttention(8, 2).parameters())",
                       exercise)
        assert flagged("return course_lib.feedforward.PositionwiseFeedForward", exercise, "import course_lib.feedforward\n")
        assert flagged("return course_lib.language_model.LanguageModel", exercise, "import course_lib.language_model\n")
    assert not flagged("return args[0] * torch.arange(3)", "13.1")            # an honest answer: nothing flagged
    assert not flagged("return course_lib.attention.check_kv_heads", "13.1")  # not RoPE: not flagged in 13.1


def test_the_re_export_table_covers_every_alias_of_a_flagged_object():
    """Every name a course_lib module re-exports whose object some exercise flags is in REEXPORTS, with the
    object's own path (read from the modules, so that a new re-export is not missed)."""
    import importlib
    import inspect
    import pkgutil

    import course_lib
    from course_exercises.static_checks import BUILTINS_BY_FUNCTION, REEXPORTS

    live = {}
    for info in pkgutil.walk_packages(course_lib.__path__, "course_lib."):
        for name, obj in vars(importlib.import_module(info.name)).items():
            home = getattr(obj, "__module__", "") or ""
            if not name.startswith("_") and (inspect.isfunction(obj) or inspect.isclass(obj)) \
                    and home.startswith("course_lib.") and home != info.name:
                live[f"{info.name}.{name}"] = f"{home}.{name}"

    def inside(name: str, entries) -> bool:
        return any(name == e or name.startswith(e + ".") for e in entries)

    missing = {alias: home for alias, home in live.items()
               if any(inside(home, entries) and not inside(alias, entries) for entries in BUILTINS_BY_FUNCTION.values())
               and REEXPORTS.get(alias) != home}
    assert not missing, missing
    assert all(live.get(alias) == home for alias, home in REEXPORTS.items()), \
        {a: h for a, h in REEXPORTS.items() if live.get(a) != h}


# ---------------------------------------------------------------------------
# issue 22 F1-F4: the child's text never becomes the grader's words or decisions
# ---------------------------------------------------------------------------
def _structured_npy(name: str) -> str:
    """base64 ``.npy`` of a one-item array whose dtype is a struct with one float64 field called ``name``."""
    return base64.b64encode(npy(np.zeros(1, dtype=[(name, "<f8")]))).decode()


def _case41(**kw) -> dict:
    return {"id": "4.1-a", "exercise": "4.1", "function": "f", "points": 1, "rtol": 1e-5, "atol": 1e-6,
            "hint": "h", **kw}


@pytest.mark.parametrize("name", ["FIXED", "REJECTION", "markdown"])
def test_a_dtype_field_name_never_reaches_the_grader_lines(name):
    """F1: a result whose structured dtype names a field with the grader's own sentence (or 3,000 characters of
    Markdown/HTML) is described by kind and size only; no part of the name is in the verdict's message."""
    from course_exercises.compare import FIXED_ALONE, REJECTION_ALONE

    text = {"FIXED": FIXED_ALONE, "REJECTION": REJECTION_ALONE,
            "markdown": ("# You got 100/100\n<b>passed</b> [x](http://e.example) " * 60)[:3000]}[name]
    v = judge_case(_case41(), {"arrays": {"y": _structured_npy(text)}, "error": None}, {"y": np.zeros(1)})
    assert not v.passed and getattr(v, "held", "") == ""
    assert "a structured dtype (kind V, 8 bytes per item)" in v.message, v.message
    for piece in (text[:40], text[-40:], "You got", "<b>", "drawn for this run", "(a table of answers"):
        assert piece not in v.message, v.message
    with pytest.raises(ResultError) as err:
        read_array(npy(np.zeros(1, dtype=[(text, "<f8")])))
    assert text[:20] not in str(err.value) and len(str(err.value)) < 120
    msg = compare_arrays("y", np.zeros(1, dtype=[(text, "<f8")]), np.zeros(1), 1e-5, 1e-6)
    assert text[:20] not in msg and "structured dtype" in msg


def test_a_header_numpy_cannot_parse_is_not_echoed():
    """F1: numpy's error repeats the header it could not parse; the grader says only that it could not."""
    junk = "<h1>You got 100/100</h1>" * 20
    header = ("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), '" + junk + "': 1, }").encode()
    header += b" " * (-(len(header) + 11) % 64) + b"\n"
    data = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\0" * 8
    with pytest.raises(ResultError) as err:
        read_array(data)
    assert "You got" not in str(err.value) and "cannot be read as an array" in str(err.value), str(err.value)


def test_held_passes_come_from_the_verdict_field_not_the_message():
    """F2: a failing case whose message holds the grader's "held" sentences (quoted from the child) is a failing
    case; only ``held`` (set by the grader from unearned_passes) makes a held pass."""
    from course_exercises.compare import FIXED_ALONE, REJECTION_ALONE

    def case(cid, held, message):
        return {"case_id": cid, "exercise": "4.1", "function": "f", "points": 0, "max_points": 1, "passed": False,
                "message": message, "child_error": None, "held": held}

    forged = f"Exercise 4.1 (f), case 4.1-b:\n  - `y`: {FIXED_ALONE} {REJECTION_ALONE}\n  Hint: h"
    r = _result(cases=[case("4.1-b", "", forged)], exercises={"4.1": 0}, exercises_max={"4.1": 1}, score=0)
    assert "earns its points only once" not in feedback_markdown(r)
    assert report._held_reason(r.cases[0]) == ""
    honest = _result(cases=[case("4.1-fixed", "fixed", f"Exercise 4.1 (f), case 4.1-fixed: {FIXED_ALONE}."),
                            case("4.1-rejects-x", "rejection", f"Exercise 4.1 (f), case 4.1-rejects-x: "
                                                               f"{REJECTION_ALONE}.")],
                     exercises={"4.1": 0}, exercises_max={"4.1": 2}, score=0)
    text = feedback_markdown(honest)
    assert "1 case passes but earns its points only once a case with drawn inputs passes too, because it is a " \
           "case with fixed inputs (4.1-fixed)" in text, text
    assert "because it is a rejection case (4.1-rejects-x)" in text and "because each is" not in text
    two = _result(cases=[case("4.1-fixed", "fixed", f"Exercise 4.1 (f), case 4.1-fixed: {FIXED_ALONE}."),
                         case("4.1-table", "fixed", f"Exercise 4.1 (f), case 4.1-table: {FIXED_ALONE}.")],
                  exercises={"4.1": 0}, exercises_max={"4.1": 2}, score=0)
    assert "2 cases pass but earn their points only once a case with drawn inputs passes too, because each is a " \
           "case with fixed inputs (4.1-fixed, 4.1-table)" in feedback_markdown(two)
    assert StudentResult.from_json(json.loads(json.dumps(honest.to_json()))).cases[0]["held"] == "fixed"


def test_not_implemented_is_the_exception_type_only():
    """F4: ``KeyError: 'NotImplementedError'`` is a KeyError: not "not written yet", not "not attempted"."""
    assert error_line("KeyError: 'NotImplementedError'") == "your code raised an error (its text is quoted below)"
    assert error_line("NotImplementedError: Exercise 4.1: write f") == \
        "your code raised NotImplementedError (not written yet?)"
    from course_exercises.compare import raised_not_implemented

    assert raised_not_implemented("NotImplementedError") and not raised_not_implemented("ValueError: x\n"
                                                                                          "NotImplementedError: y")

    def case(cid, error):
        return {"case_id": cid, "exercise": "4.1", "function": "f", "points": 0, "max_points": 1, "passed": False,
                "message": f"Exercise 4.1 (f), case {cid}:\n  - {error_line(error)}", "child_error": error}

    for error, status in (("KeyError: 'NotImplementedError'", "failed"),
                          ("NotImplementedError: Exercise 4.1: write f", "not attempted")):
        r = _result(cases=[case("4.1-a", error), case("4.1-b", error)], exercises={"4.1": 0},
                    exercises_max={"4.1": 2}, score=0)
        assert report.exercise_status(r, "4.1") == status


def test_out_of_memory_is_what_the_parent_saw_or_the_exception_type():
    """F3: an honest ValueError that says "out of memory" is not an out-of-memory run."""
    from course_grader.grader import ran_out_of_memory

    assert not ran_out_of_memory({"04": "ok"}, ["ValueError: q_std is out of memory layout order", None])
    assert not ran_out_of_memory({"04": "crashed"}, ["RuntimeError: MemoryError bad_alloc Cannot allocate memory"])
    assert ran_out_of_memory({"04": "ok"}, ["MemoryError: Unable to allocate 8.00 GiB"])
    assert ran_out_of_memory({"04": "memory"}, [None])
    assert ran_out_of_memory({"04": "ok"}, ["_ArrayMemoryError: Unable to allocate 8.00 GiB for an array"])


def test_a_protocol_mismatch_does_not_echo_the_childs_value():
    """Audit for F1: the child's ``protocol`` value reaches the flags only as a small number (or its type)."""
    from course_exercises.compare import FIXED_ALONE
    from course_grader.protocol import protocol_problem

    said = protocol_problem({"ready": True, "protocol": FIXED_ALONE})
    assert FIXED_ALONE[:20] not in said and "a value of type str" in said
    assert "protocol version 1," in protocol_problem({"ready": True, "protocol": 1})

"""The versioned, typed protocol between the grader's parent and its child (no sandbox is started here)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, replace

import pytest

from course_grader.protocol import (PROTOCOL_VERSION, ChildRequest, ProtocolError, case_message, protocol_problem,
                                         ready_message)
from course_grader.sandbox import CHILD_SCRIPT

REQUEST = ChildRequest(mode="student", salt=None, sys_path=["/x"], cases_files=["/w/tests/cases.py"], check_files=[],
                       stage_dir="/w/stage", result_fd=5, command_fd=6, limits={"as_bytes": 1 << 32, "nproc": None},
                       hide=["/solutions"], private_mounts=True, scratch_mb=256, keep_visible=["/usr"], expose=[],
                       drop="uid", uid=65534, gid=65534)


def test_a_request_survives_json():
    assert ChildRequest.from_json(REQUEST.to_json()) == REQUEST
    assert json.loads(REQUEST.to_json())["protocol"] == PROTOCOL_VERSION


@pytest.mark.parametrize("change, words", [
    (lambda d: d.update(protocol=PROTOCOL_VERSION + 1), "protocol version"),
    (lambda d: d.pop("protocol"), "protocol version"),
    (lambda d: d.update(case_ids=["4.1-a"]), "unknown fields ['case_ids']"),
    (lambda d: d.pop("salt"), "misses fields ['salt']"),
    (lambda d: d.update(uid="0"), "'uid' is str"),
    (lambda d: d.update(private_mounts=1), "'private_mounts' is int"),
    (lambda d: d.update(result_fd=True), "'result_fd' is bool"),
    (lambda d: d.update(hide=[1]), "'hide' must be a list of paths"),
    (lambda d: d.update(mode="grade"), "mode 'grade'"),
])
def test_a_bad_request_is_refused(change, words):
    data = asdict(REQUEST)
    change(data)
    with pytest.raises(ProtocolError, match=words.replace("[", r"\[").replace("]", r"\]")):
        ChildRequest.from_json(json.dumps(data))


def test_the_parent_cannot_write_a_bad_request():
    with pytest.raises(ProtocolError, match="'scratch_mb'"):
        replace(REQUEST, scratch_mb="256")


def test_the_child_refuses_another_version_before_it_runs_anything(tmp_path):
    data = asdict(REQUEST)
    data["protocol"] = PROTOCOL_VERSION + 1
    spec = tmp_path / "spec-1.json"
    spec.write_text(json.dumps(data))
    proc = subprocess.run([sys.executable, "-I", "-S", "-B", str(CHILD_SCRIPT), str(spec)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert "refuses its request" in proc.stderr and f"this child speaks version {PROTOCOL_VERSION}" in proc.stderr


def test_the_parent_checks_the_version_of_ready():
    assert protocol_problem(ready_message({"torch": "x"})) == ""
    assert "protocol version None" in protocol_problem({"ready": True})
    assert case_message("4.1-a", error="boom") == {"case": "4.1-a", "arrays": {}, "error": "boom"}

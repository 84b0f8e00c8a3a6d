"""The versioned protocol between the grader's parent and its child (:mod:`.child`).

Down: the parent writes one :class:`ChildRequest` as ``spec-N.json`` in the
child's work folder and passes its path on the child's command line; later
commands are lines on the command pipe: one :func:`run_command` per *unit*
(the cases of one chapter that run together, with the stand-ins they need;
see :func:`course_grader.sandbox.plan_units`), ``exit`` ends the child.
Up: the child sends framed JSON messages on the result pipe
(8 bytes of length, big-endian, then UTF-8 JSON), built by the functions
below: :func:`ready_message` once, then per unit one :func:`notebook_message`,
one :func:`case_message` per case and :func:`done_message`; a probe child
sends one :func:`probe_message`.

Version 2 (stand-ins): a unit's command carries the source text of the
course's definitions that replace the student's for its cases (exercise B
calling exercise A's function runs with the course's A). The parent sends
it only after every case of A is closed - its results received or its
unit's deadline passed - so that the child never holds a reference for
anything it can still be graded on.

Both sides check :data:`PROTOCOL_VERSION`: the child refuses a request of
another version (:class:`ProtocolError`, before it runs anything), and the
parent accepts a student or reference child only when its ``ready`` message
names the same version (a probe child, which runs no student code and sends
one :func:`probe_message`, is not asked for one).
Everything the child sends is untrusted data once student code has run: the
parent reads each field it uses with its own checks (:mod:`.sandbox`,
:mod:`.compare`), never the message as a whole.

This module imports only the standard library: the child loads it by path,
before any import path is set up and before it isolates itself.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

__all__ = ["PROTOCOL_VERSION", "ProtocolError", "ChildRequest", "ready_message", "case_message", "done_message",
           "probe_message", "protocol_problem", "run_command", "parse_command", "notebook_message",
           "NOTEBOOK_STATUSES"]

#: raised whenever a field of :class:`ChildRequest` or a message changes meaning
PROTOCOL_VERSION = 2
#: the child's modes
MODES = ("student", "reference", "probe")


class ProtocolError(ValueError):
    """A request that is not of this :data:`PROTOCOL_VERSION`, or has unknown, missing or mistyped fields."""


@dataclass(frozen=True)
class ChildRequest:
    """What one child is asked to do (``spec-N.json``).

    Attributes:
        mode: ``"student"``, ``"reference"`` or ``"probe"``.
        salt: the reference run's secret (reference mode only; ``None`` otherwise).
        sys_path: the child's only import paths (it runs with ``python -I -S``).
        cases_files: cases files to load (student copies in student mode).
        check_files: student copies the reference run loads to check that they carry no expected value.
        stage_dir: a folder of the grader's where the child stages the paths it exposes to nobody.
        result_fd, command_fd: the child's ends of the result and command pipes.
        limits: resource limits (``as_bytes``, ``cpu_s``, ``fsize_bytes``, ``nofile``, ``nproc``,
            ``stream_chars``; see :meth:`course_grader.sandbox.Limits.rlimits`).
        hide: folders to cover with empty read-only tmpfs mounts.
        private_mounts: cover the host, private scratch ``/tmp``, read-only remounts (namespace sandboxes).
        scratch_mb: size of the private ``/tmp``.
        keep_visible: paths bound back after the host is covered (interpreter, imports, work folder).
        expose: paths to make reachable for nobody (bind mounts through ``stage_dir``).
        drop: ``"uid"`` (become nobody), ``"caps"`` (drop every capability) or ``None``.
        uid, gid: the user and group to become when ``drop == "uid"``.
        protocol: :data:`PROTOCOL_VERSION` of the side that wrote the request.
    """

    mode: str
    salt: str | None
    sys_path: list[str]
    cases_files: list[str]
    check_files: list[str]
    stage_dir: str
    result_fd: int
    command_fd: int
    limits: dict
    hide: list[str]
    private_mounts: bool
    scratch_mb: int
    keep_visible: list[str]
    expose: list[str]
    drop: str | None
    uid: int
    gid: int
    protocol: int = field(default=PROTOCOL_VERSION)

    def __post_init__(self) -> None:
        problem = _field_problem(asdict(self))
        if problem:
            raise ProtocolError(problem)

    def to_json(self) -> str:
        """The request as JSON text."""
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> "ChildRequest":
        """Parse a request; :class:`ProtocolError` for another version or unknown, missing or mistyped fields."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ProtocolError(f"the child's request is not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise ProtocolError("the child's request is not a JSON object")
        if data.get("protocol") != PROTOCOL_VERSION:
            raise ProtocolError(f"the child's request is of protocol version {data.get('protocol')!r}; this child "
                                f"speaks version {PROTOCOL_VERSION} (parent and child come from different installs?)")
        unknown, missing = sorted(set(data) - set(_TYPES)), sorted(set(_TYPES) - set(data))
        if unknown or missing:
            raise ProtocolError(f"the child's request has unknown fields {unknown} and misses fields {missing}")
        return cls(**data)


#: field -> the JSON types it may hold (checked both when writing and when reading a request)
_TYPES: dict[str, tuple[type, ...]] = {
    "mode": (str,), "salt": (str, type(None)), "sys_path": (list,), "cases_files": (list,), "check_files": (list,),
    "stage_dir": (str,), "result_fd": (int,), "command_fd": (int,), "limits": (dict,), "hide": (list,),
    "private_mounts": (bool,), "scratch_mb": (int,), "keep_visible": (list,), "expose": (list,),
    "drop": (str, type(None)), "uid": (int,), "gid": (int,), "protocol": (int,),
}
_PATH_LISTS = ("sys_path", "cases_files", "check_files", "hide", "keep_visible", "expose")


def _field_problem(data: dict) -> str:
    """Why ``data`` is not a valid request (``""`` when it is)."""
    for name, types in _TYPES.items():
        value = data.get(name)
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            return f"the child's request field {name!r} is {type(value).__name__}; expected {types[0].__name__}"
    bad_list = next((n for n in _PATH_LISTS if not all(isinstance(p, str) for p in data[n])), None)
    if bad_list:
        return f"the child's request field {bad_list!r} must be a list of paths"
    if data["mode"] not in MODES:
        return f"the child's request mode {data['mode']!r} is not one of {', '.join(MODES)}"
    return ""


# ---------------------------------------------------------------------------
# The child's messages (JSON objects; the parent trusts none of their fields)
# ---------------------------------------------------------------------------
def ready_message(versions: dict, **reference) -> dict:
    """Sent once, after the cases are loaded and before any student code runs.

    Args:
        versions: ``{"torch": ..., "numpy": ..., "python": ...}`` of the child.
        reference: in the reference run only, ``notebooks``, ``cases`` (their
            manifest entries) and ``leaks`` (student copies that still hold an answer).
    """
    return {"ready": True, "protocol": PROTOCOL_VERSION, "versions": versions, **reference}


def case_message(case_id: str, arrays: dict | None = None, error: str | None = None, **extra) -> dict:
    """One case's result: ``arrays`` (key -> base64 ``.npy`` text) or the ``error`` text.

    ``extra``: ``seconds`` (student run); ``expected``, ``inputs`` and ``draws`` (reference run).
    """
    return {"case": case_id, "arrays": arrays or {}, "error": error, **extra}


def done_message(chapter: str, unit: int = 0) -> dict:
    """The end of one unit's results (``unit``: its number in the parent's plan)."""
    return {"done": chapter, "unit": unit}


#: a notebook's status in :func:`notebook_message`
NOTEBOOK_STATUSES = ("ok", "missing", "unreadable")


def notebook_message(chapter: str, status: str, problem: str = "", notes: list | None = None) -> dict:
    """Sent once per unit, after the notebook is loaded and before its cases: ``status`` (one of
    :data:`NOTEBOOK_STATUSES`), why it cannot be read (``problem``) and one note per skipped code cell."""
    return {"notebook": chapter, "status": status, "problem": problem, "notes": list(notes or [])}


def run_command(chapter: str, unit: int, cases: list[str], standins: dict[str, str] | None = None) -> str:
    """One command line (ASCII JSON, no line break): run ``cases`` of ``chapter``'s notebook, with ``standins``
    (function name -> source text) in place of the student's functions; ``unit`` is echoed in the ``done``."""
    return json.dumps({"run": chapter, "unit": unit, "cases": list(cases), "standins": dict(standins or {})},
                      ensure_ascii=True, separators=(",", ":"))


def parse_command(line: str) -> dict | None:
    """A :func:`run_command` line back as ``{"run", "unit", "cases", "standins"}``; ``None`` for ``exit``/empty.

    Raises:
        ProtocolError: not a command of this protocol.
    """
    line = line.strip()
    if not line or line == "exit":
        return None
    try:
        command = json.loads(line)
    except ValueError:
        raise ProtocolError(f"not a command: {line[:80]!r}") from None
    if (not isinstance(command, dict) or set(command) != {"run", "unit", "cases", "standins"}
            or not isinstance(command["run"], str) or not isinstance(command["unit"], int)
            or not isinstance(command["cases"], list) or not all(isinstance(c, str) for c in command["cases"])
            or not isinstance(command["standins"], dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in command["standins"].items())):
        raise ProtocolError(f"malformed command: {line[:80]!r}")
    return command


def probe_message(report: dict) -> dict:
    """The probe child's report of what isolation did (uid, writable places, failures)."""
    return {"probe": report}


def protocol_problem(ready: dict) -> str:
    """Why the parent refuses a child's ``ready`` message (``""``: it speaks this protocol)."""
    got = ready.get("protocol")
    if got != PROTOCOL_VERSION:
        # the child's value is shown only when it is a small whole number: any other text it sent is its own
        small = got is None or (type(got) is int and abs(got) < 10 ** 6)
        shown = repr(got) if small else f"a value of type {type(got).__name__}"
        return (f"the child speaks protocol version {shown}, the parent {PROTOCOL_VERSION} "
                "(parent and child come from different installs?)")
    return ""

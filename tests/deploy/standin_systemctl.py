"""A ``systemctl``-compatible stand-in for a machine without a running systemd (a container).

It manages user units the way ``systemctl --user`` does for the verbs the systemd executor
and its tests use: ``start``, ``stop``, ``restart``, ``is-active`` and ``show -p MainPID``.
Units are read from ``$XDG_RUNTIME_DIR/systemd/user/UNIT`` (a user manager's runtime
units; ``[Service]`` with ``EnvironmentFile=``, ``Environment=`` and ``ExecStart=``). At
every start the environment file is read with systemd's syntax, ``$VAR`` in ExecStart
splits into words and ``${VAR}`` stays one, and the service starts with a clean
environment in a session of its own (output to ``UNIT.log`` beside its MainPID under
``$XDG_RUNTIME_DIR``); stop sends SIGTERM to the group, SIGKILL after 5 s. As with
``Type=exec``, a start whose environment file is missing or whose binary cannot be
executed fails the job: exit 1 with systemd's message. Without ``--user`` it answers as
systemctl does in a container without systemd.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

STOP_TIMEOUT = 5.0


def main(argv: list[str]) -> int:
    """Run one systemctl verb; returns systemctl's exit code."""
    user = "--user" in argv
    args = [a for a in argv if a != "--user"]
    if not user:
        print(
            "System has not been booted with systemd as init system (PID 1). Can't operate.\n"
            "Failed to connect to bus: Host is down",
            file=sys.stderr,
        )
        return 1
    if args[:1] == ["show"]:
        unit = args[-1]
        print(f"MainPID={_main_pid(unit) or 0}")
        return 0
    if len(args) != 2:
        print("stand-in systemctl: expected VERB UNIT", file=sys.stderr)
        return 1
    verb, unit = args
    if verb == "is-active":
        state = "active" if _main_pid(unit) else "inactive"
        print(state)
        return 0 if state == "active" else 3
    path = _unit_dir() / unit
    if not path.is_file():
        print(f"Failed to {verb} {unit}: Unit {unit} not found.", file=sys.stderr)
        return 5
    if verb in ("stop", "restart"):
        _stop(unit)
    if verb in ("start", "restart"):
        return _start(unit, path)
    return 0


def _unit_dir() -> Path:
    # The user manager's runtime unit directory (/run/user/UID/systemd/user): found through
    # XDG_RUNTIME_DIR, the variable systemctl --user itself needs.
    return Path(os.environ["XDG_RUNTIME_DIR"]) / "systemd" / "user"


def _state_dir() -> Path:
    state = Path(os.environ["XDG_RUNTIME_DIR"]) / "standin-systemd"
    state.mkdir(parents=True, exist_ok=True)
    return state


def _main_pid(unit: str) -> int | None:
    try:
        pid = int((_state_dir() / f"{unit}.pid").read_text())
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, ValueError):
        return None
    return None if state in ("Z", "X") else pid


def _stop(unit: str) -> None:
    pid = _main_pid(unit)
    if pid is None:
        return
    for sig, wait in ((signal.SIGTERM, STOP_TIMEOUT), (signal.SIGKILL, STOP_TIMEOUT)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and _main_pid(unit) is not None:
            time.sleep(0.05)
        if _main_pid(unit) is None:
            break
    (_state_dir() / f"{unit}.pid").unlink(missing_ok=True)


def _failed(unit: str) -> int:
    print(
        f"Job for {unit} failed because the control process exited with error code.\n"
        f'See "systemctl --user status {unit}" and "journalctl --user -xeu {unit}" for details.',
        file=sys.stderr,
    )
    return 1


def _start(unit: str, path: Path) -> int:
    service = _service_section(path.read_text())
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/"),
        "LANG": "C.UTF-8",
        "XDG_RUNTIME_DIR": os.environ["XDG_RUNTIME_DIR"],
    }
    for assignment in service.get("Environment", []):
        for word in shlex.split(assignment):
            name, _, value = word.partition("=")
            env[name] = value
    for name in service.get("EnvironmentFile", []):
        optional = name.startswith("-")
        try:
            env.update(_environment_file(Path(name.lstrip("-")).read_text()))
        except OSError:
            if not optional:
                return _failed(unit)
    exec_start = service.get("ExecStart", [""])[-1]
    argv = _expand(exec_start, env)
    log = (_state_dir() / f"{unit}.log").open("ab")
    try:
        process = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True,
        )  # fmt: skip
    except OSError:
        return _failed(unit)
    (_state_dir() / f"{unit}.pid").write_text(str(process.pid))
    return 0


def _service_section(text: str) -> dict[str, list[str]]:
    section, found = "", {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]":
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def _environment_file(text: str) -> dict[str, str]:
    """systemd's EnvironmentFile= syntax: KEY=VALUE, quotes with backslash escapes."""
    values = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        name, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        elif len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        values[name.strip()] = value
    return values


def _expand(command: str, env: dict[str, str]) -> list[str]:
    """ExecStart's expansion: a word that is exactly ``$NAME`` becomes the value split at
    whitespace (none if empty); ``${NAME}`` inside a word is replaced in place."""
    words: list[str] = []
    for word in shlex.split(command):
        if word.startswith("$") and not word.startswith("${") and word[1:].isidentifier():
            words += env.get(word[1:], "").split()
            continue
        expanded = word
        for name, value in env.items():
            expanded = expanded.replace("${" + name + "}", value)
        words.append(expanded)
    return words


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

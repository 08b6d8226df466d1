"""Reading a file the operator names (a plan, an engine or model config) as text or as JSON,
or saying why not.

Every way the read can fail is one :class:`~rolloutd.errors.Problem` against the path, never
a traceback. The size is checked before reading, so a path to a model file by mistake costs
a ``stat``, not gigabytes of memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rolloutd.errors import BadInput

MIB = 1024 * 1024


def read_limited(path: Path, *, what: str, limit: int) -> bytes:
    """The bytes of the file at ``path``, refused past ``limit`` before they are read where
    the size can be seen, and once one byte past it was read where it cannot.

    :raises BadInput: the file is larger than ``limit`` (``what`` names it: "a suite").
    :raises OSError: it cannot be opened or read.
    """
    source = str(path)
    allowed = f"{what} may be at most {limit} bytes ({limit / MIB:g} MiB)"
    size = path.stat().st_size
    if size > limit:
        raise BadInput.one(source, "", f"is {size} bytes; {allowed}")
    # A device or a pipe has no size to stat (/dev/zero never ends): read one byte past the
    # limit to tell.
    with path.open("rb") as handle:
        raw = handle.read(limit + 1)
    if len(raw) > limit:
        raise BadInput.one(source, "", f"holds more than {limit} bytes; {allowed}")
    return raw


def read_user_file(path: Path, *, expected: str, what: str, limit: int) -> str:
    """The UTF-8 text of the file at ``path``, at most ``limit`` bytes.

    The messages say what the file should be, ``expected`` ("a YAML plan"), and what the
    limit is for, ``what`` ("a plan").

    :raises BadInput: the file is missing, a directory, unreadable, larger than ``limit``
        (a device or a pipe counts what it yields), binary (it holds a NUL byte) or not UTF-8.
    """
    source = str(path)
    try:
        if path.is_dir():
            raise BadInput.one(source, "", f"is a directory; expected {expected} file")
        raw = read_limited(path, what=what, limit=limit)
    except FileNotFoundError:
        raise BadInput.one(source, "", "no such file") from None
    except PermissionError:
        raise BadInput.one(source, "", "permission denied") from None
    except OSError as exc:
        raise BadInput.one(source, "", f"cannot be read: {exc.strerror}") from None
    if b"\x00" in raw:
        raise BadInput.one(source, "", f"is a binary file; expected {expected}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput.one(source, "", f"is not UTF-8 text; expected {expected}") from None


def read_json_object(path: Path, *, expected: str, what: str, limit: int) -> dict[str, Any]:
    """The JSON object in the file at ``path``; the arguments are :func:`read_user_file`'s.

    :raises BadInput: the file cannot be read (see :func:`read_user_file`), is not JSON, is
        nested too deeply, or holds something other than an object.
    """
    source = str(path)
    text = read_user_file(path, expected=expected, what=what, limit=limit)
    try:
        with refusing_deep_nesting(source):
            data = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise BadInput.one(source, "", f"is not valid JSON at {where}: {exc.msg}") from None
    except ValueError as exc:
        # Not a syntax error: a number of thousands of digits, which int() refuses.
        raise BadInput.one(source, "", f"is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadInput.one(source, "", f"expected a JSON object at the top level ({expected})")
    return data


@contextmanager
def refusing_deep_nesting(source: str) -> Iterator[None]:
    """Turn the RecursionError of a parser (or of whatever walks what it returned) into a
    problem with the file ``source``: thousands of ``[`` in a row are bad input, not a
    fault of rolloutd.

    :raises BadInput: the document is nested deeper than the parser can follow.
    """
    try:
        yield
    except RecursionError:
        raise BadInput.one(source, "", "is nested too deeply to read") from None


MAX_YAML_DEPTH = 100


def refuse_deep_yaml(text: str, source: str, loader: Any) -> None:
    """Refuse a YAML document nested more than :data:`MAX_YAML_DEPTH` collections deep,
    reading only its events: libyaml's parser is a loop, but the C composer PyYAML builds on
    it recurses once per level with no limit of its own, and 100,000 ``[`` in a row overflow
    the C stack (a segmentation fault, not an exception) with some PyYAML builds. A plan is
    six levels deep.

    :raises BadInput: the document is nested too deeply.
    :raises yaml.YAMLError: the text is not valid YAML (the caller reports where).
    """
    import yaml

    depth = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise BadInput.one(source, "", "is nested too deeply to read")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def safe_yaml(text: str, source: str, *, what: str = "YAML") -> Any:
    """The document in ``text`` (PyYAML's safe loader), or one problem with ``source``.

    :raises BadInput: the text is not valid YAML (``what`` names what it should be), holds a
        value no type can (a date 2025-13-45), or is nested too deeply to read.
    """
    import yaml  # only the commands that read a YAML file pay for it

    try:
        with refusing_deep_nesting(source):
            return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BadInput.one(source, "", f"is not valid {what}: {exc}") from None
    except (ValueError, TypeError, OverflowError) as exc:
        raise BadInput.one(source, "", f"holds a value that cannot be read: {exc}") from None

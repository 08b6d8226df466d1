"""Reading a file the operator names (a plan, an engine config) as text, or saying why not.

Every way the read can fail is one :class:`~rolloutd.errors.Problem` against the path, never
a traceback. The size is checked before reading, so a path to a model file by mistake costs
a ``stat``, not gigabytes of memory.
"""

from __future__ import annotations

from pathlib import Path

from rolloutd.errors import BadInput

MIB = 1024 * 1024


def read_user_file(path: Path, *, expected: str, what: str, limit: int) -> str:
    """The UTF-8 text of the file at ``path``, at most ``limit`` bytes.

    The messages say what the file should be, ``expected`` ("a YAML plan"), and what the
    limit is for, ``what`` ("a plan").

    :raises BadInput: the file is missing, a directory, unreadable, larger than ``limit``,
        binary (it holds a NUL byte) or not UTF-8.
    """
    source = str(path)
    try:
        if path.is_dir():
            raise BadInput.one(source, "", f"is a directory; expected {expected} file")
        size = path.stat().st_size
        if size > limit:
            raise BadInput.one(
                source,
                "",
                f"is {size} bytes; {what} may be at most {limit} bytes ({limit / MIB:g} MiB)",
            )
        raw = path.read_bytes()
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

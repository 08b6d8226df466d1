"""Reading a tool-argument suite: a JSONL file of cases, checked whole before any request.

One case per line::

    {"id": "refund-0007",
     "messages": [{"role": "user", "content": "..."}],
     "tools": [{"type": "function", "function": {"name": "issue_refund", "parameters": {...}}}],
     "expected": {"name": "issue_refund", "arguments": {"order_id": "ORD-123456", ...}},
     "tags": ["refunds"]}

A tool may also be written bare (``{"name", "parameters"}``). Blank lines are skipped.

A *reference* case carries the answer instead of a call, for answers that are text (a RAG
agent's reply): ``reference`` (one string, or a list of acceptable answers) and optionally
``context`` (the retrieved chunks, put in the prompt ahead of the messages), and no
``tools`` or ``expected``::

    {"id": "returns-0003",
     "messages": [{"role": "user", "content": "How long do I have to return boots?"}],
     "context": ["Footwear may be returned within 60 days if unworn.", "..."],
     "reference": "60 days, if the boots are unworn."}

A suite is all call cases or all reference cases: the two are scored and judged apart.
Every problem is reported with the file, the line and the field, and a suite with any
problem is refused as a whole: a run over half a suite would be compared with a run over
all of it.

A case nests lists and objects at most :data:`MAX_DEPTH` deep, and a tool's ``$ref`` must
point into its own schema: the checks and comparisons that follow recurse through both, so
a deeper case would exhaust the stack, and jsonschema fetches a ``$ref`` to another document
over the network.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, SchemaError
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from rolloutd.errors import BadInput, Problem
from rolloutd.userfiles import MIB, read_limited

KEYS = frozenset({"id", "messages", "tools", "expected", "reference", "context", "tags", "meta"})
MAX_PROBLEMS = 20
MAX_DEPTH = 64
MAX_SUITE_BYTES = 64 * MIB
"""A suite is read whole; 64 MiB holds some 20,000 cases of the example suite's size."""
"""How deeply a case may nest lists and objects; real tool calls use a handful of levels."""
_TOOL_URI = "urn:rolloutd:tool"


@dataclass(frozen=True)
class SuiteCase:
    """One case: the conversation, the tools offered, and the call that answers it."""

    id: str
    line: int
    messages: tuple[dict[str, Any], ...] = field(hash=False)
    tools: tuple[dict[str, Any], ...] = field(hash=False)
    expected_name: str = ""
    expected_arguments: dict[str, Any] = field(default_factory=dict, hash=False)
    tags: tuple[str, ...] = ()
    reference: tuple[str, ...] = ()
    context: tuple[str, ...] = ()

    @property
    def is_reference(self) -> bool:
        """Whether the case is answered in text, scored against reference answers."""
        return bool(self.reference)

    def schema_of(self, tool: str) -> dict[str, Any] | None:
        """The JSON Schema of ``tool``'s arguments, or None when the case does not offer it."""
        for function in self.tools:
            if function["name"] == tool:
                parameters: dict[str, Any] = function.get("parameters", {})
                return parameters
        return None

    def openai_tools(self) -> list[dict[str, Any]]:
        """The tools in the chat-completions ``tools`` form."""
        return [{"type": "function", "function": function} for function in self.tools]


@dataclass(frozen=True)
class Suite:
    """A checked suite: where it came from, the digest of its bytes, and its cases in order."""

    path: str
    sha256: str
    cases: tuple[SuiteCase, ...]

    def __len__(self) -> int:
        return len(self.cases)

    @property
    def is_reference(self) -> bool:
        """Whether the suite's cases carry reference answers rather than expected calls."""
        return bool(self.cases) and self.cases[0].is_reference


def load_suite(path: str | Path) -> Suite:
    """Read and check the suite at ``path``.

    :raises BadInput: the file cannot be read, is empty, or has problems; each problem
        names ``path:line`` and the field (at most ``MAX_PROBLEMS`` are listed).
    """
    source = str(path)
    try:
        data = read_limited(Path(path), what="a suite", limit=MAX_SUITE_BYTES)
    except OSError as exc:
        raise BadInput.one(source, "", f"cannot read the suite: {exc.strerror or exc}") from None
    return parse_suite(data, source)


def parse_suite(data: bytes, source: str) -> Suite:
    """Check the suite's bytes; ``source`` names it in messages.

    :raises BadInput: as :func:`load_suite`.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput.one(source, "", f"not UTF-8 text (byte {exc.start})") from None
    problems: list[Problem] = []
    cases: list[SuiteCase] = []
    first_line: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        found: list[tuple[str, str]] = []
        case = _case(line, number, found)
        if case is not None and cases and case.is_reference != cases[0].is_reference:
            mine = "reference" if case.is_reference else "expected"
            first = "a reference case" if cases[0].is_reference else "a call case"
            message = (
                f"line {cases[0].line} is {first}: a suite is all call cases ('expected') "
                "or all reference cases ('reference')"
            )
            found.append((mine, message))
        if case is not None and case.id in first_line:
            found.append(("id", f"duplicate id {case.id!r} (first on line {first_line[case.id]})"))
        elif case is not None:
            first_line[case.id] = number
        problems += [Problem(where, name, message) for name, message in found]
        if case is not None and not found:
            cases.append(case)
        if len(problems) >= MAX_PROBLEMS:
            problems.append(Problem(source, "", f"stopped after {MAX_PROBLEMS} problems"))
            break
    if problems:
        raise BadInput(problems)
    if not cases:
        raise BadInput.one(source, "", "the suite has no cases (one JSON object per line)")
    return Suite(source, hashlib.sha256(data).hexdigest(), tuple(cases))


def nests_deeper(value: object, limit: int) -> bool:
    """Whether ``value`` nests lists and objects more than ``limit`` deep (walked without
    recursion, so any depth can be asked about)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[object] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not a JSON number")


def _case(line: str, number: int, problems: list[tuple[str, str]]) -> SuiteCase | None:
    too_deep = f"nests lists and objects deeper than {MAX_DEPTH} levels"
    try:
        document = json.loads(line, parse_constant=_not_json)
    except ValueError as exc:
        problems.append(("", f"not valid JSON: {exc}"))
        return None
    except RecursionError:
        # json gives up near Python's recursion limit, long past MAX_DEPTH.
        problems.append(("", too_deep))
        return None
    if nests_deeper(document, MAX_DEPTH):
        problems.append(("", too_deep))
        return None
    if not isinstance(document, dict):
        problems.append(("", f"expected a JSON object, got {type(document).__name__}"))
        return None
    unknown = sorted(set(document) - KEYS)
    if unknown:
        problems.append((unknown[0], f"unknown key; expected one of {', '.join(sorted(KEYS))}"))
    case_id = document.get("id")
    if not isinstance(case_id, str) or not case_id.strip():
        problems.append(("id", "required: a non-empty string"))
        return None
    messages = _messages(document.get("messages"), problems)
    tags = _tags(document, problems)
    if "reference" in document:
        return _reference_case(document, case_id, number, messages, tags, problems)
    tools, broken = _tools(document.get("tools"), problems)
    expected = _expected(document.get("expected"), tools, broken, problems)
    if expected is None:
        return None
    return SuiteCase(case_id, number, messages, tools, expected[0], expected[1], tags)


def _tags(document: dict[str, Any], problems: list[tuple[str, str]]) -> tuple[str, ...]:
    tags = document.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        problems.append(("tags", "expected a list of strings"))
        return ()
    return tuple(tags)


def _reference_case(
    document: dict[str, Any],
    case_id: str,
    number: int,
    messages: tuple[dict[str, Any], ...],
    tags: tuple[str, ...],
    problems: list[tuple[str, str]],
) -> SuiteCase | None:
    for key in ("expected", "tools"):
        if key in document:
            problems.append((key, "a reference case has no tools and no expected call"))
    reference = _strings(document["reference"], "reference", problems, allow_one=True)
    context = _strings(document.get("context", []), "context", problems, allow_one=False)
    if not reference:
        return None
    return SuiteCase(case_id, number, messages, (), tags=tags, reference=reference, context=context)


def _strings(
    value: object, name: str, problems: list[tuple[str, str]], *, allow_one: bool
) -> tuple[str, ...]:
    if allow_one and isinstance(value, str):
        value = [value]
    expected = "a non-empty string or a list of them" if allow_one else "a list of strings"
    if not isinstance(value, list) or (allow_one and not value):
        problems.append((name, f"expected {expected}"))
        return ()
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            problems.append((f"{name}[{index}]", "expected a non-empty string"))
            return ()
    return tuple(value)


def _messages(value: object, problems: list[tuple[str, str]]) -> tuple[dict[str, Any], ...]:
    if not isinstance(value, list) or not value:
        problems.append(("messages", "required: a non-empty list of chat messages"))
        return ()
    for index, message in enumerate(value):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            problems.append((f"messages[{index}]", "expected an object with a 'role'"))
    return tuple(message for message in value if isinstance(message, dict))


def _tools(
    value: object, problems: list[tuple[str, str]]
) -> tuple[tuple[dict[str, Any], ...], set[str]]:
    """The valid tools, and the names of tools whose schema is broken (already reported)."""
    if not isinstance(value, list) or not value:
        problems.append(("tools", "required: a non-empty list of tools"))
        return (), set()
    functions: list[dict[str, Any]] = []
    broken: set[str] = set()
    for index, tool in enumerate(value):
        where = f"tools[{index}]"
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            problems.append((where, "expected {'type': 'function', 'function': {'name', ...}}"))
            continue
        name = function["name"]
        if any(known["name"] == name for known in functions):
            problems.append((f"{where}.name", f"tool {name!r} is offered twice"))
        parameters = function.get("parameters", {"type": "object"})
        if not isinstance(parameters, dict):
            problems.append((f"{where}.parameters", "expected a JSON Schema object"))
            broken.add(name)
            continue
        try:
            Draft202012Validator.check_schema(parameters)
        except SchemaError as exc:
            path = "".join(f"[{p!r}]" for p in exc.path)
            message = f"not a valid JSON Schema: {exc.message}"
            problems.append((f"{where}.parameters{path}", message))
            broken.add(name)
            continue
        unresolved = _unresolved_ref(parameters)
        if unresolved is not None:
            problems.append((f"{where}.parameters", unresolved))
            broken.add(name)
            continue
        functions.append({**function, "parameters": parameters})
    return tuple(functions), broken


def _unresolved_ref(schema: dict[str, Any]) -> str | None:
    """What is wrong with the first ``$ref`` that does not point into ``schema``, if any."""
    registry = Registry().with_resource(_TOOL_URI, DRAFT202012.create_resource(schema))
    resolver = registry.resolver(_TOOL_URI)
    stack: list[object] = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        if not isinstance(item, dict):
            continue
        ref = item.get("$ref")
        if isinstance(ref, str):
            try:
                resolver.lookup(ref)
            except Unresolvable:
                return f"$ref {ref!r} does not point into the tool's schema"
        stack.extend(item.values())
    return None


def _expected(
    value: object,
    tools: tuple[dict[str, Any], ...],
    broken: set[str],
    problems: list[tuple[str, str]],
) -> tuple[str, dict[str, Any]] | None:
    if not isinstance(value, dict):
        problems.append(("expected", "required: the expected call, {'name', 'arguments'}"))
        return None
    name, arguments = value.get("name"), value.get("arguments")
    if not isinstance(name, str) or not name:
        problems.append(("expected.name", "required: the name of the tool to call"))
        return None
    if not isinstance(arguments, dict):
        problems.append(("expected.arguments", "required: a JSON object of arguments"))
        return None
    schemas: Mapping[str, dict[str, Any]] = {t["name"]: t["parameters"] for t in tools}
    if name in broken:
        return None  # its schema's problem is reported; nothing to check the call against
    if name not in schemas:
        offered = ", ".join(schemas) or "none"
        problems.append(("expected.name", f"{name!r} is not one of the case's tools ({offered})"))
        return None
    validator = Draft202012Validator(schemas[name], format_checker=FormatChecker())
    try:
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
    except Unresolvable as exc:
        # A $ref relative to a nested $id that the check from the root did not catch.
        message = f"$ref {exc.ref!r} in the schema of {name} cannot be resolved"
        problems.append(("expected.arguments", message))
        return None
    for error in errors:
        path = ".".join(str(p) for p in error.path)
        where = f"expected.arguments.{path}" if path else "expected.arguments"
        problems.append((where, f"violates the schema of {name}: {error.message}"))
    return name, arguments

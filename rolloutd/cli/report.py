"""``rolloutctl report``: a rollout's page as one self-contained HTML file, or as JSON."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import click

from rolloutd.cli.common import ROW_ID, database, output_option
from rolloutd.errors import BadInput


@click.command("report")
@click.argument("rollout_id", metavar="ID", type=ROW_ID)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write the page as one HTML file (styles and charts inline, no script) to FILE.",
)
@output_option(
    "summary", help="What to print: where the report went, or the report's data as JSON."
)
def report_command(rollout_id: int, html_path: Path | None, output: str) -> None:
    """Write a rollout's page (why it rolled back: the deciding gate, its value against its
    threshold and the evidence; then the router weight, a chart per gate with canary beside
    stable where the gate compares them, suite runs, pinned artefacts, the artefact pair's
    drills, the timeline) as one HTML file for a postmortem or a ticket, or print its
    data as JSON. Gates with many evaluations are thinned to every verdict change, every
    decisive evaluation and one per time slice.

    \b
    Examples:
      rolloutctl report 7 --html rollout-7.html
      rolloutctl report 7 -o json | jq '.gates[] | {name, stored}'
      rolloutctl report 7 -o json | jq .decision
    """
    from rolloutd.web.pages import rollout_html, rollout_json

    now = datetime.now(UTC)
    if output == "json" and html_path is None:
        with database() as session:
            document = rollout_json(session, rollout_id, now=now)
        click.echo(json.dumps(document, indent=2))
        return
    target = html_path or Path(f"rollout-{rollout_id}.html")
    with database() as session:
        html = rollout_html(session, rollout_id, now=now, report=True)
    written = html.encode()
    write_atomically(target, written)
    if output == "json":
        click.echo(json.dumps({"rollout": rollout_id, "html": str(target), "bytes": len(written)}))
    else:
        click.echo(f"wrote {target} ({len(written) / 1024:.0f} KiB)")


def write_atomically(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` whole or not at all, readable as a new file would be.

    :raises BadInput: the file cannot be written there, or ``target`` exists and is not a
        regular file (replacing a device or a FIFO with a file is never what was meant).
    """
    if target.exists() and not target.is_file():
        raise BadInput.one(str(target), "", "is not a regular file; name a file to write")
    temporary: str | None = None
    try:
        with tempfile.NamedTemporaryFile(
            "wb", dir=target.parent or Path("."), prefix=f".{target.name}.", delete=False
        ) as handle:
            temporary = handle.name
            handle.write(data)
        # mkstemp makes the file 0600; a report is meant to be shared like any file written.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, target)
    except OSError as exc:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
        raise BadInput.one(str(target), "", f"cannot write the report: {exc.strerror}") from None

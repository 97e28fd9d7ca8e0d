"""The README and the guides in docs/: a short README whose first screen names the two commands and links each of the
user's journeys to where it is explained, and relative links that all lead to a file and heading that exist."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer.main

from clustercert.cli.app import app
from tests.conftest import ROOT

README = ROOT / "README.md"
GUIDES = ("operating", "auditing", "reference", "development")
MAX_README_LINES = 200
FIRST_SCREEN = 40
# Each journey of the user's, and words its line in the README's first screen must name (the commands it takes).
JOURNEYS = {
    "try it on the sample": ("make certify",),
    "certify your cluster's folder or archive": ("evidence init", "evidence seal", "evidence check", "certify"),
    "schedule it": ("clustercert server", "PREFECT_API_URL", "clustercert schedule", "deployment run"),
    "verify or re-run a report": ("clustercert verify", "clustercert rerun"),
    "run the test phases on slurm": ("clustercert run", "make demo-slurm"),
}
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~)")


def _documents() -> list[Path]:
    return [README, ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _prose(text: str) -> Iterator[str]:
    """The lines of a markdown text outside fenced code blocks."""
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            yield line


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped but hyphens and underscores, spaces as
    hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: Counter[str] = Counter()
    anchors = set()
    for line in _prose(path.read_text(encoding="utf-8")):
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            slug = _slug(match.group(1))
            anchors.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
            seen[slug] += 1
    return anchors


def _links(path: Path) -> list[tuple[int, str]]:
    """Every relative link target in `path`'s prose, with its line number."""
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        for target in _LINK.findall(line):
            if not re.match(r"[a-z][a-z0-9+.-]*:", target):
                found.append((number, target))
    return found


def _broken(source: Path, target: str) -> str | None:
    """Why `target`, linked from `source`, leads nowhere; None when it leads to an existing file (and heading)."""
    file_part, _, anchor = target.partition("#")
    dest = (source.parent / file_part).resolve() if file_part else source
    shown = dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest
    if not dest.exists():
        return f"no file {shown}"
    if anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
        return f"no heading with the anchor #{anchor} in {shown}"
    return None


def test_the_readme_is_at_most_200_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md: expected at most {MAX_README_LINES} lines, got {len(lines)}"


def test_the_readme_opens_with_the_two_commands() -> None:
    """The first thing after the title is one code block holding exactly `make certify` and `make test`."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# ")
    body = [line for line in lines[1:] if line.strip()]
    assert _FENCE.match(body[0]), body[0]
    block = body[1:body.index(next(line for line in body[1:] if _FENCE.match(line)))]
    assert [line.split("#")[0].strip() for line in block] == ["make certify", "make test"]


def test_the_first_screen_says_what_it_does_and_links_every_journey_to_its_guide() -> None:
    first = "\n".join(README.read_text(encoding="utf-8").splitlines()[:FIRST_SCREEN])
    assert "clustercert certifies a GPU training cluster" in first
    assert "`make certify` prints" in first and "`make test` runs" in first
    items = re.findall(r"^\d\. \*\*(.+?)\.\*\*(.*?)(?=^\d\. |^\s*$)", first, flags=re.M | re.S)
    assert [title.lower() for title, _ in items] == list(JOURNEYS)
    for (title, body), words in zip(items, JOURNEYS.values(), strict=True):
        missing = [w for w in words if w not in body]
        assert not missing, f"journey {title!r}: expected its commands {missing} named in the README's first screen"
        guides = [t for t in _LINK.findall(body) if t.startswith("docs/") and "#" in t]
        assert guides, f"journey {title!r}: expected a link to a section of a guide in docs/, got {body!r}"
        assert all(_broken(README, t) is None for t in guides), [(t, _broken(README, t)) for t in guides]


def test_the_four_guides_exist_and_the_readme_links_each() -> None:
    links = {target.partition("#")[0] for _, target in _links(README)}
    for guide in GUIDES:
        assert (ROOT / "docs" / f"{guide}.md").is_file()
        assert f"docs/{guide}.md" in links, f"README.md: expected a link to docs/{guide}.md"


@pytest.mark.parametrize("document", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(document: Path) -> None:
    broken = [(number, target, why) for number, target in _links(document)
              if (why := _broken(document, target)) is not None]
    assert not broken, f"{document.relative_to(ROOT)}: broken links (line, target, why): {broken}"


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    """The checker itself: a missing file, a missing heading and a good anchor with punctuation in its heading."""
    (tmp_path / "guide.md").write_text("# Guide\n\n## Signals, full disks (and `errors`)\n", encoding="utf-8")
    source = tmp_path / "README.md"
    source.write_text("[a](guide.md#signals-full-disks-and-errors) [b](gone.md) [c](guide.md#nothing)\n",
                      encoding="utf-8")
    guide = (tmp_path / "guide.md").resolve()
    assert [_broken(source, t) for _, t in _links(source)] == [
        None, f"no file {guide.parent / 'gone.md'}", f"no heading with the anchor #nothing in {guide}"]


def test_the_readme_and_the_reference_name_every_command() -> None:
    """The command table of the README, and the reference's, name each command of the command tree."""
    def leaves(command: object, path: tuple[str, ...]) -> Iterator[str]:
        subs = getattr(command, "commands", None)
        if not subs:
            yield " ".join(path)
            return
        for name, sub in subs.items():
            yield from leaves(sub, (*path, name))

    commands = sorted(leaves(typer.main.get_command(app), ()))
    assert {"certify", "verify", "rerun", "runs", "schedule", "server", "run", "simulate", "keys init",
            "evidence init", "evidence seal", "evidence check", "evidence parse"} <= set(commands)
    for document in (README, ROOT / "docs" / "reference.md"):
        text = document.read_text(encoding="utf-8")
        missing = [c for c in commands if f"`{c}" not in text]
        assert not missing, f"{document.relative_to(ROOT)}: expected every command named, missing {missing}"


def test_what_the_code_sends_readers_to_the_readme_for_is_there() -> None:
    """The report's Reproducibility section names a README section; the server hints and the stand-alone verifier
    say "see README" for a server and PREFECT_API_URL, and for `pyhanko sign validate`."""
    readme = README.read_text(encoding="utf-8")
    template = (ROOT / "templates" / "report.html.j2").read_text(encoding="utf-8")
    named = re.findall(r'see the README, "([^"]+)"', template)
    assert named, "templates/report.html.j2: expected the README section it names"
    assert all(_slug(name) in _anchors(README) for name in named), named
    assert "clustercert server" in readme and "PREFECT_API_URL=http://127.0.0.1:4200/api" in readme
    assert "pyhanko sign validate" in readme

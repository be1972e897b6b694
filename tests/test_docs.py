"""The docs stand alone: every file a doc links to or names as `../something.md` is in the repository, and no doc
but CHANGELOG.md carries a dated log (a reader wants the current figures; the history is the changelog's)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("*/README.md"), *ROOT.glob("*/*/README.md")])
DOCS = [d for d in DOCS if ".venv" not in d.parts]
# A markdown link's target, or a path a sentence sends the reader to (`../shared/DESIGN.md`).
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)|`((?:\.\./|\./)[\w./-]+\.md)`")
MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
DATED = re.compile(rf"\b\d{{1,2}} ({MONTHS})\b|\b({MONTHS}) \d{{1,2}}\b|\b\d{{1,2}} (Dec|Nov|Jan)\b|"
                   r"\b20\d\d-\d\d-\d\d\b|\b\d\d:\d\d UTC\b")
# A dated name that is not a log: the MCP protocol revision the adapters doc talks about.
NOT_A_LOG = re.compile(r"protocol \(?20\d\d-\d\d-\d\d")


def test_every_linked_file_is_in_the_repository():
    missing = []
    for doc in DOCS:
        for m in LINK.finditer(doc.read_text()):
            target = m.group(1) or m.group(2)
            if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                continue
            if not (doc.parent / target).exists():
                missing.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not missing, "links to files the repository does not ship:\n" + "\n".join(missing)


def test_no_doc_but_the_changelog_carries_dates():
    dated = [f"{doc.relative_to(ROOT)}:{n}: {line.strip()[:100]}"
             for doc in DOCS for n, line in enumerate(doc.read_text().splitlines(), 1)
             if DATED.search(NOT_A_LOG.sub("", line))]
    assert not dated, "dated lines (move the history to CHANGELOG.md):\n" + "\n".join(dated)


def test_the_checks_see_what_they_look_for(tmp_path):
    """Negative control: the patterns catch the forms the docs used to carry."""
    for line in ("Default run at 4 December 18:25 UTC", "ia-018, 2026-12-02 17:13", "(3 Dec, fresh clones)"):
        assert DATED.search(line), line
    assert not DATED.search(NOT_A_LOG.sub("", "a client of the stateless protocol (2026-07-28, the default"))
    assert LINK.search("Read `../shared/DESIGN.md` first").group(2) == "../shared/DESIGN.md"

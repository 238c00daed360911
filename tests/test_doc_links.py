"""The guide's links lead somewhere: every relative link in README.md, CHANGELOG.md and the docs
names a file that exists and, with `#anchor`, a heading of that file (GitHub's heading slugs)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [
    ROOT / "README.md",
    ROOT / "CHANGELOG.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "casu_dataset" / "scenarios" / "README.md",
    ROOT / "harness" / "README.md",
]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def headings(path: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.*)$", path.read_text(), re.M)}


def broken_links(paths) -> list[str]:
    found = []
    for f in paths:
        text = re.sub(r"```.*?```", "", Path(f).read_text(), flags=re.S)  # code blocks hold no links
        for m in re.finditer(r"\]\(([^)\s]+)\)", text):
            url = m.group(1)
            if re.match(r"[a-z]+:", url):  # http:, https:, mailto:
                continue
            path, _, anchor = url.partition("#")
            target = Path(f).parent / path if path else Path(f)
            if not target.exists():
                found.append(f"{f.name}: {url}: no such file")
            elif anchor and target.suffix == ".md" and anchor not in headings(target):
                found.append(f"{f.name}: {url}: no such heading")
    return found


def test_every_relative_link_in_the_docs_resolves(tmp_path):
    assert all(p.is_file() for p in DOCS)
    assert broken_links(DOCS) == []
    # The check sees a missing file and a missing heading (a planted page).
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\n[ok](#a-page) [gone](nowhere.md) [no](#no-such-part)\n```\n[x](in-code.md)\n```\n"
    )
    assert broken_links([page]) == [
        "page.md: nowhere.md: no such file",
        "page.md: #no-such-part: no such heading",
    ]

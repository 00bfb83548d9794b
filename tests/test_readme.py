"""The README is a door: short, and every relative link in it (and in docs/) leads somewhere that exists.

No model, no network: reads Markdown files only."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_README_LINES = 250

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code spans (a link there is not a link)."""
    return re.sub(r"`[^`\n]*`", "", _FENCE.sub("", text))


def _links(path: Path) -> list[str]:
    return _LINK.findall(_prose(path.read_text(encoding="utf-8")))


def _relative(link: str) -> bool:
    return not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", link)  # http:, https:, mailto: ...


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for _, heading in _HEADING.findall(_FENCE.sub("", path.read_text(encoding="utf-8"))):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _broken(path: Path) -> list[str]:
    broken = []
    for link in _links(path):
        if not _relative(link):
            continue
        target, _, anchor = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        if not file.exists():
            broken.append(f"{link}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{link}: no heading #{anchor} in {file.relative_to(ROOT)}")
    return broken


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; the door holds {MAX_README_LINES}"


def test_every_relative_link_in_the_readme_exists():
    links = [link for link in _links(README) if _relative(link)]
    assert links, "the README links nothing: the parser is broken"
    assert _broken(README) == []


def test_the_readme_links_every_doc():
    linked = {(README.parent / link.partition("#")[0]).resolve() for link in _links(README) if _relative(link)}
    assert DOCS and [doc.name for doc in DOCS if doc.resolve() not in linked] == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_relative_link_in_the_docs_exists(doc):
    assert _broken(doc) == []


def test_slugs_follow_github():
    assert _slug("A model that knows: Qwen2.5-Coder-1.5B-Instruct") == "a-model-that-knows-qwen25-coder-15b-instruct"
    assert _slug("Where does a trace go wrong?") == "where-does-a-trace-go-wrong"
    assert _slug("Step-wise `pos` & more") == "step-wise-pos--more"

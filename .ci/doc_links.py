#!/usr/bin/env python3
"""Check the internal links and anchors of the built guide, and the README's relative links.

Usage: doc_links.py BOOK_DIR [MARKDOWN ...]

In BOOK_DIR (the HTML mdbook built) every href and src without a scheme must name a file
that exists inside BOOK_DIR, and a #fragment must be an id in that file. In each MARKDOWN
file, every relative link must name a file or folder that exists, and a #fragment on a
Markdown target must match one of its headings (GitHub's anchor rules). Exits 1 on any broken
link, listing each.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for k, v in attrs:
            if v is None:
                continue
            if k in ("id", "name"):
                self.ids.add(v)
            elif k in ("href", "src") and tag in ("a", "img", "link", "script"):
                self.links.append(v)


def parse(path: Path, cache: dict[Path, Links]) -> Links:
    if path not in cache:
        p = Links()
        p.feed(path.read_text(encoding="utf-8", errors="replace"))
        cache[path] = p
    return cache[path]


def external(url: str) -> bool:
    s = urlsplit(url)
    return bool(s.scheme) or url.startswith("//")


def check_book(book: Path) -> list[str]:
    bad: list[str] = []
    cache: dict[Path, Links] = {}
    root = book.resolve()
    pages = sorted(root.rglob("*.html"))
    # mdbook's generated print page, 404 page and search assets only repeat the others
    for page in pages:
        if page.name in ("print.html", "404.html"):
            continue
        for url in parse(page, cache).links:
            if external(url) or url.startswith(("mailto:", "javascript:")):
                continue
            s = urlsplit(url)
            target = page if not s.path else (page.parent / unquote(s.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            where = f"{page.relative_to(root)}: {url}"
            if root not in target.parents and target != root:
                bad.append(f"{where} (leaves the book)")
                continue
            if not target.exists():
                bad.append(f"{where} (no such file)")
                continue
            if s.fragment and target.suffix == ".html":
                if unquote(s.fragment) not in parse(target, cache).ids:
                    bad.append(f"{where} (no anchor #{s.fragment})")
    print(f"links: {len(pages)} pages of {book}")
    return bad


def slug(heading: str) -> str:
    h = re.sub(r"[`*_\[\]()]", "", heading.strip().lower())
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


LINK = re.compile(r"\]\(([^)\s]+)\)")


def check_markdown(md: Path) -> list[str]:
    bad = []
    text = md.read_text(encoding="utf-8")
    # drop fenced code
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    for url in LINK.findall(text):
        if external(url) or url.startswith("mailto:"):
            continue
        s = urlsplit(url)
        target = md if not s.path else (md.parent / unquote(s.path))
        if not target.exists():
            bad.append(f"{md}: {url} (no such file)")
            continue
        if s.fragment and target.suffix == ".md":
            heads = re.findall(r"^#+\s+(.*)$", target.read_text(encoding="utf-8"), flags=re.M)
            if s.fragment not in {slug(h) for h in heads}:
                bad.append(f"{md}: {url} (no heading #{s.fragment})")
    return bad


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    bad = check_book(Path(sys.argv[1]))
    for md in sys.argv[2:]:
        bad += check_markdown(Path(md))
    for b in bad:
        print(f"broken link: {b}")
    print(f"links: {len(bad)} broken")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

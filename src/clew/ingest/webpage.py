"""HTML → the page's main content as markdown-like text, with selectolax (lexbor, an HTML5 parser
in C: linear on any input, and the fastest of the parsers measured in ``bench/loaders.py``).

What a reader of the page came for is kept; the site around it is not:

- the content root is the page's ``<main>`` (or ``role="main"``), else its one ``<article>``,
  else ``<body>``;
- navigation, page header and footer, sidebars, forms, scripts, styles and hidden elements are
  dropped (``<nav>``, ``<aside>``, ``<footer>``, ``<header>`` outside an article, the matching
  ARIA roles, ``hidden`` / ``aria-hidden="true"``);
- headings become ``#`` lines (the chunker's heading path), list items ``-`` lines, ``<pre>``
  keeps its line breaks, other blocks become paragraphs;
- a table becomes one line per row of ``header: value`` pairs (the first row, or ``<th>``
  cells, is the header), so cells never run together.

The title is the page's ``<title>``, else its first ``<h1>``. Links (``href``) inside the content
root that point into the corpus (not to another site, not to an anchor) become the document's
links for the graph.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from selectolax.lexbor import LexborHTMLParser

from clew.ingest.formats import table_rows

__all__ = ["Page", "parse_page"]

_DROP = frozenset(
    {
        "script",
        "style",
        "noscript",
        "template",
        "head",
        "nav",
        "aside",
        "footer",
        "form",
        "button",
        "select",
        "svg",
        "iframe",
        "object",
        "canvas",
        "dialog",
        "menu",
    }
)
_DROP_ROLES = frozenset(
    {"navigation", "banner", "contentinfo", "complementary", "search", "menu", "menubar"}
)
_BLOCKS = frozenset(
    {
        "p",
        "div",
        "section",
        "article",
        "main",
        "ul",
        "ol",
        "dl",
        "dd",
        "dt",
        "blockquote",
        "figure",
        "figcaption",
        "details",
        "summary",
        "address",
        "header",
        "hr",
        "body",
        "center",
    }
)
_HEADINGS = {f"h{i}": i for i in range(1, 7)}
_EXTERNAL = re.compile(r"[a-z][a-z0-9+.-]*:|//", re.IGNORECASE)
_SPACES = re.compile(r"[ \t\r\n\f\v\u00a0]+")


@dataclass(frozen=True, slots=True)
class Page:
    title: str
    text: str
    links: tuple[str, ...]


def _attr(node: Any, name: str) -> str:
    value = node.attributes.get(name)
    return "" if value is None else str(value)


def _dropped(node: Any, in_article: bool) -> bool:
    tag = node.tag
    if tag in _DROP or (tag == "header" and not in_article):
        return True
    attrs = node.attributes
    if not attrs:
        return False
    if "hidden" in attrs or _attr(node, "aria-hidden").lower() == "true":
        return True
    return _attr(node, "role").lower() in _DROP_ROLES


def _root(tree: LexborHTMLParser) -> Any:
    main = tree.css_first("main") or tree.css_first('[role="main"]')
    if main is not None:
        return main
    articles = tree.css("article")
    if len(articles) == 1:
        return articles[0]
    return tree.body if tree.body is not None else tree.root


def _table(node: Any) -> str:
    """A table's rows as ``header: value`` records (cells' own markup flattened)."""
    rows: list[list[str]] = []
    for tr in node.css("tr"):
        # cells of this row only, not of a table nested in a cell
        cells = [c for c in tr.iter() if c.tag in ("td", "th")]
        rows.append([_SPACES.sub(" ", c.text(separator=" ")).strip() for c in cells])
    return "\n".join(table_rows(rows))


def parse_page(source: str) -> Page:
    """The page's title, main content as text, and its local links (see the module)."""
    tree = LexborHTMLParser(source)
    title_node = tree.css_first("title")
    title = _SPACES.sub(" ", title_node.text()).strip() if title_node is not None else ""
    root = _root(tree)
    parts: list[str] = []
    links: list[str] = []
    if root is None:
        return Page(title, "", ())
    in_article = root.tag != "body" and root.tag != "html"  # main or article: its header stays
    # explicit stack (node, closing?): a page nested a million deep is no recursion
    stack: list[tuple[Any, bool, bool, int]] = [(root, False, in_article, 0)]
    while stack:
        node, closing, article, pre = stack.pop()
        tag = node.tag
        if closing:
            if tag in _BLOCKS or tag == "pre":
                parts.append("\n\n")
            continue
        if tag == "-text":
            text = node.text_content or ""
            parts.append(text if pre else _SPACES.sub(" ", text))
            continue
        if tag is None or tag.startswith("-"):  # comments, doctype
            continue
        if node is not root and _dropped(node, article):
            continue
        if tag == "table":
            rows = _table(node)
            if rows:
                parts.append(f"\n\n{rows}\n\n")
            continue
        if tag == "br":
            parts.append("\n")
            continue
        if tag in _HEADINGS:
            parts.append("\n\n" + "#" * _HEADINGS[tag] + " ")
            heading = _SPACES.sub(" ", node.text(separator=" ")).strip()
            parts.append(heading + "\n\n")
            continue
        if tag == "li":
            parts.append("\n- ")
        elif tag == "pre" or tag in _BLOCKS:
            parts.append("\n\n")
        if tag == "a":
            href = _attr(node, "href").strip()
            if href and not href.startswith("#") and _EXTERNAL.match(href) is None:
                links.append(href)
        stack.append((node, True, article, pre))
        inner = article or tag == "article"
        inner_pre = pre + (1 if tag == "pre" else 0)
        stack.extend(
            (c, False, inner, inner_pre) for c in reversed(list(node.iter(include_text=True)))
        )
    lines = (line.rstrip(" \t") for line in "".join(parts).split("\n"))
    body = "\n".join(x[1:] if x.startswith(" ") and not x.startswith("  ") else x for x in lines)
    body = re.sub(r"\n{3,}", "\n\n", body).strip()
    if not title:
        h1 = root.css_first("h1")
        if h1 is not None:
            title = _SPACES.sub(" ", h1.text(separator=" ")).strip()
    return Page(title, body, tuple(dict.fromkeys(links)))

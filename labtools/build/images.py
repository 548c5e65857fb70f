"""The images a notebook's markdown shows, and whether every place a student opens it can show them.

Colab renders neither cell attachments (`![..](attachment:x.png)`: googlecolab/colabtools
issue 3836) nor files beside the notebook (a Colab notebook has no folder); GitHub's
notebook view shows no attachments either. What every viewer shows: an image inside the
markdown as a `data:` URI, and one on the web over https. The labs' figures are therefore
written as data URIs (labtools/build/schematics.py); the website turns them back into files.
"""

from __future__ import annotations

import re

SHOWN_EVERYWHERE = re.compile(r"^(https://|data:image/(png|jpeg|gif|svg\+xml|webp);base64,)")
_HTML_SRC = re.compile(r"""<img\b[^>]*?\bsrc\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))""", re.I)


def markdown_images(text: str) -> list[str]:
    """The address of every image the markdown `text` shows: `![alt](address)` wherever it
    stands (in a link, a list, a table), and `<img src=...>` in raw HTML; not in code."""
    import mistune

    found: list[str] = []

    def walk(tokens):
        for token in tokens:
            kind = token.get("type")
            if kind == "image":
                found.append(token.get("attrs", {}).get("url", ""))
            elif kind in ("inline_html", "block_html"):
                found.extend(next(g for g in m.groups() if g is not None) for m in _HTML_SRC.finditer(token["raw"]))
            walk(token.get("children") or [])

    walk(mistune.create_markdown(renderer=None, plugins=["table"])(text))
    return found


def not_shown_everywhere(nb) -> list[str]:
    """`cell n: address` for each markdown image some viewer (Colab, GitHub) cannot show."""
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        for address in markdown_images(cell.source):
            if not SHOWN_EVERYWHERE.match(address):
                problems.append(f"cell {index}: {address[:80]}")
        if cell.get("attachments"):
            problems.append(f"cell {index}: has attachments ({', '.join(cell.attachments)})")
    return problems

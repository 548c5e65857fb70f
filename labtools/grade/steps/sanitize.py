"""Nothing a student wrote runs in a browser.

A graded notebook is shown in two browsers: the student's (the feedback HTML) and
the instructor's (formgrader, served from the instructor's logged-in Jupyter
origin, where a script could drive the server's API). Every output in it came from
the student's kernel, and any markdown cell may have been edited by the student.
Three layers, each enough on its own for the common attacks:

1. **The data** (`neutralize`, run by autograde through `NeutralizeStudentContent`):
   the autograded notebook keeps only outputs that cannot run code when rendered
   (plain text, PNG and JPEG images with valid base64, integer sizes); HTML,
   JavaScript, SVG, markdown, LaTeX and widget outputs become plain text; raw
   cells stop being raw HTML; cell ids, tags and execution counts that would land
   in HTML attributes are made safe; markdown the release did not hold has its
   raw HTML escaped. So formgrader, feedback, and any viewer see inert content.
2. **The renderer**: `HTMLExporter.sanitize_html = True` with `clean_html` below
   (bleach with an allowlist wide enough for the labs' own markdown: headings,
   tables, `<details>`), for feedback and formgrader alike.
3. **The page**: feedback files carry a Content Security Policy that allows no
   script at all (`SafeFeedbackExporter`), so even markup that slipped through
   the first two layers cannot run. (Maths in feedback shows as TeX source.)
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
import uuid

import bleach
import nbformat
from nbconvert.exporters import HTMLExporter
from nbgrader.preprocessors import NbGraderPreprocessor

from ... import nbcells

SAFE_MIMETYPES = ("text/plain", "image/png", "image/jpeg")
BLANK_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; font-src data:; "
       "script-src 'none'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-src 'none'")
_CELL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_TAG = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_STREAMS = ("stdout", "stderr")

# The renderer's allowlist: what the labs' markdown produces once rendered.
ALLOWED_TAGS = sorted({
    *bleach.ALLOWED_TAGS, "p", "br", "hr", "div", "span", "pre", "code", "h1", "h2", "h3", "h4", "h5", "h6",
    "table", "thead", "tbody", "tr", "th", "td", "details", "summary", "img", "sup", "sub", "del", "s",
    "dl", "dt", "dd", "kbd",
})
ALLOWED_ATTRIBUTES = {
    **bleach.ALLOWED_ATTRIBUTES, "*": ["class", "id"], "img": ["src", "alt", "width", "height"],
    "th": ["align", "style"], "td": ["align", "style"], "a": ["href", "title", "class"],
}
ALLOWED_PROTOCOLS = ["http", "https", "mailto", "data"]


def _data_uri_ok(tag, name, value) -> bool:
    if name != "src" or not value.startswith("data:"):
        return True
    return value.startswith(("data:image/png;base64,", "data:image/jpeg;base64,"))


def clean_html(element) -> str:
    """`clean_html` filter for nbconvert's templates (replaces nbconvert's own, which
    escapes headings, paragraphs and tables): bleach with an allowlist."""
    return _clean_text(element.decode() if isinstance(element, bytes) else str(element))


@functools.lru_cache(maxsize=8192)
def _clean_text(text: str) -> str:
    # A pure function of the text, cached: a grading worker renders the same lab's cells for
    # every submission, and bleach's parser was most of the time a feedback page took.
    from bleach.css_sanitizer import CSSSanitizer

    attributes = dict(ALLOWED_ATTRIBUTES)
    img = attributes.pop("img")
    attributes["img"] = lambda tag, name, value: name in img and _data_uri_ok(tag, name, value)
    return bleach.clean(text, tags=ALLOWED_TAGS, attributes=attributes, protocols=ALLOWED_PROTOCOLS,
                        css_sanitizer=CSSSanitizer(allowed_css_properties=["text-align"]), strip_comments=True)


def _valid_base64(data) -> bool:
    if not isinstance(data, str):
        return False
    try:
        base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _as_text(value) -> str:
    if isinstance(value, list):
        value = "".join(str(v) for v in value)
    return str(value)


def _clean_output(output, changes: list[str], where: str):
    kind = output.get("output_type")
    if kind == "stream":
        name = output.get("name") if output.get("name") in _STREAMS else "stdout"
        return {"output_type": "stream", "name": name, "text": _as_text(output.get("text", ""))}
    if kind == "error":
        return {"output_type": "error", "ename": _as_text(output.get("ename", "Error")),
                "evalue": _as_text(output.get("evalue", "")),
                "traceback": [_as_text(t) for t in output.get("traceback", []) if isinstance(t, (str, list))]}
    if kind not in ("display_data", "execute_result"):
        changes.append(f"{where}: removed an output of unknown type {str(kind)[:40]!r}")
        return None
    data = output.get("data") if isinstance(output.get("data"), dict) else {}
    kept, dropped = {}, []
    for mime, value in data.items():
        if mime == "text/plain":
            kept[mime] = _as_text(value)
        elif mime in ("image/png", "image/jpeg") and _valid_base64(_as_text(value)):
            kept[mime] = "".join(_as_text(value).split())
        else:
            dropped.append(mime)
    if dropped:
        changes.append(f"{where}: {', '.join(sorted(str(m)[:60] for m in dropped))} output shown as text")
        if "text/plain" not in kept:
            original = next((data[m] for m in dropped if m in ("text/html", "text/markdown", "text/latex",
                                                                 "image/svg+xml", "application/javascript")), "")
            kept["text/plain"] = (f"[{', '.join(sorted(str(m)[:60] for m in dropped))} output, shown as text]\n"
                                  + _as_text(original)[:20000])
    metadata = {}
    for mime in ("image/png", "image/jpeg"):
        meta = (output.get("metadata") or {}).get(mime)
        if mime in kept and isinstance(meta, dict):
            sizes = {k: meta[k] for k in ("width", "height") if type(meta.get(k)) is int}
            if sizes:
                metadata[mime] = sizes
    clean = {"output_type": kind, "data": kept, "metadata": metadata}
    if kind == "execute_result":
        count = output.get("execution_count")
        clean["execution_count"] = count if type(count) is int else None
    return clean


def _escape_html(markdown: str) -> str:
    """Raw HTML in markdown shown as text: `<` is all a tag needs."""
    return markdown.replace("<", "&lt;")


def neutralize(nb, trusted_markdown=frozenset(), escape_markdown: bool = True) -> list[str]:
    """Make the notebook inert in any HTML view, in place; return what changed, in words.

    `trusted_markdown`: markdown sources the instructor wrote (they keep their HTML);
    `escape_markdown=False` leaves markdown to the renderer's sanitizer.
    """
    changes: list[str] = []
    seen_ids: set[str] = set()
    for index, cell in enumerate(nb.cells):
        where = f"cell {index + 1}"
        cell_id = cell.get("id")
        if cell_id is not None and (not isinstance(cell_id, str) or not _CELL_ID.fullmatch(cell_id)
                                    or cell_id in seen_ids):
            cell["id"] = uuid.uuid4().hex[:16]
            changes.append(f"{where}: replaced an invalid cell id")
        if cell.get("id") is not None:
            seen_ids.add(cell["id"])
        metadata = cell.get("metadata") or {}
        tags = metadata.get("tags")
        if tags is not None:
            safe = [t for t in tags if isinstance(t, str) and _TAG.fullmatch(t)] if isinstance(tags, list) else []
            if safe != tags:
                changes.append(f"{where}: removed unsafe cell tags")
                metadata["tags"] = safe
        for key in [k for k in metadata if k not in ("nbgrader", "tags", "deletable", "editable", "collapsed",
                                                    "scrolled", "jupyter", "execution")]:
            del metadata[key]
        if cell.cell_type == "raw":
            # raw cells with an HTML format are pasted into the page as they are
            cell.cell_type, cell["source"] = "markdown", _escape_html(_as_text(cell.get("source", "")))
            cell.pop("attachments", None)
            changes.append(f"{where}: raw cell shown as text")
        elif cell.cell_type == "markdown":
            attachments = cell.get("attachments") or {}
            for name in list(attachments):
                bundle = attachments[name] if isinstance(attachments[name], dict) else {}
                safe = {m: v for m, v in bundle.items() if m in ("image/png", "image/jpeg") and _valid_base64(_as_text(v))}
                if safe:
                    attachments[name] = safe
                else:  # a blank image keeps the markdown that refers to it renderable
                    attachments[name] = {"image/png": BLANK_PNG}
                    changes.append(f"{where}: replaced an attachment that is not a PNG or JPEG image")
            source = _as_text(cell.get("source", ""))
            if escape_markdown and source not in trusted_markdown and "<" in source:
                cell["source"] = _escape_html(source)
                changes.append(f"{where}: HTML in markdown shown as text")
        elif cell.cell_type == "code":
            count = cell.get("execution_count")
            cell["execution_count"] = count if type(count) is int else None
            outputs = [_clean_output(o, changes, where) for o in cell.get("outputs", []) if isinstance(o, dict)]
            cell["outputs"] = [nbformat.from_dict(o) for o in outputs if o is not None]
    language = nb.metadata.get("language_info")
    nb.metadata = nbformat.from_dict({k: v for k, v in nb.metadata.items() if k in ("kernelspec", "nbgrader", nbcells.GRADER_KEY)})
    if isinstance(language, dict) and isinstance(language.get("name"), str) and language["name"].isidentifier():
        nb.metadata["language_info"] = {"name": language["name"]}
    return changes


def trusted_markdown(*notebooks) -> set[str]:
    """Markdown sources of instructor notebooks, except the answer cells students fill in."""

    return {cell.source for nb in notebooks for cell in nb.cells
            if cell.cell_type == "markdown" and not nbcells.is_solution(cell)}


class NeutralizeStudentContent(NbGraderPreprocessor):
    """Autograde step: make the graded notebook inert before formgrader or feedback show it.

    Markdown identical to the lab's source keeps its HTML (the labs' `<details>`
    answers); anything else has its HTML escaped.
    """

    def preprocess(self, nb, resources):
        from . import course_notebook

        source = course_notebook(self.config, resources, "source")
        trusted = trusted_markdown(nbcells.read(source)) if source else set()
        changes = neutralize(nb, trusted)
        if changes:
            self.log.info("made student content safe to show: %s", "; ".join(changes[:20]))
        return nb, resources


class SafeFeedbackExporter(HTMLExporter):
    """nbgrader's feedback HTML, sanitized, with a Content Security Policy that
    allows no script: set as `GenerateFeedback.exporter_class`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sanitize_html = True
        self.filters = {**self.filters, "clean_html": clean_html}

    def from_notebook_node(self, nb, resources=None, **kw):
        # outputs of a notebook that skipped autograde's step; markdown is left to the sanitizer
        neutralize(nb, escape_markdown=False)
        output, resources = self._render(nb, resources, **kw)
        meta = f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        head = output.find("<head>")
        output = output[: head + 6] + "\n" + meta + output[head + 6:] if head >= 0 else meta + output
        return output, resources

    def _render(self, nb, resources=None, **kw):
        """HTMLExporter.from_notebook_node without its second pass over the whole page: it parses
        the page again with BeautifulSoup only to give images without alt text one, and cells'
        input and output areas tabindex="0" (most of a feedback page's time: 1.6 s of 1.8 s for a
        1.2 MB lab 1 page). The same two changes are made here on the rendered text, and the page
        differs from nbconvert's only in BeautifulSoup's re-serialization (tests/test_sanitize.py)."""
        from nbconvert.exporters.templateexporter import TemplateExporter
        from nbconvert.filters.highlight import Highlight2HTML
        from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter

        langinfo = nb.metadata.get("language_info", {})
        lexer = langinfo.get("pygments_lexer", langinfo.get("name", None))
        highlight_code = self.filters.get("highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self))
        resources = self._init_resources(resources)
        filter_data_type = WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata, parent=self,
                                                 resources=resources)
        self.register_filter("highlight_code", highlight_code)
        self.register_filter("filter_data_type", filter_data_type)
        html, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        html = _IMG_WITHOUT_ALT.sub('<img alt="No description has been provided for this image"', html)
        return _FOCUSABLE.sub(r'\1 tabindex="0"', html), resources


_IMG_WITHOUT_ALT = re.compile(r"<img(?=[\s/>])(?![^>]*\salt=)", re.IGNORECASE)
# a div whose class list holds one of these (whole class names), without a tabindex of its own yet
_FOCUSABLE = re.compile(r'(<div class="[^"]*(?<![\w-])(?:jp-Cell-inputWrapper|jp-OutputArea-output)(?![\w-])[^"]*")'
                        r'(?![^>]*\stabindex=)')

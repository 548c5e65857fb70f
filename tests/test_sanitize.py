"""labtools.grade.steps.sanitize on hand-made notebooks: what may reach an HTML template."""

from __future__ import annotations

import nbformat

from labtools.grade.steps.sanitize import BLANK_PNG, clean_html, neutralize

PNG = BLANK_PNG


def _notebook(*cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    return nb


def test_outputs_keep_only_inert_mimetypes():
    cell = nbformat.v4.new_code_cell("x", outputs=[
        nbformat.v4.new_output("display_data", data={"text/html": "<script>x()</script>", "text/plain": "df"}),
        nbformat.v4.new_output("display_data", data={"application/javascript": "x()"}),
        nbformat.v4.new_output("display_data", data={"image/svg+xml": "<svg onload='x()'/>"}),
        nbformat.v4.new_output("display_data", data={"image/png": PNG + '" onerror="x()'}),
        nbformat.v4.new_output("display_data", data={"image/png": PNG},
                               metadata={"image/png": {"width": '1 onerror=x()', "height": 40}}),
    ])
    cell.execution_count = '1]<script>x()</script>'
    changes = neutralize(_notebook(cell))
    kinds = [set(o["data"]) for o in cell.outputs]
    assert kinds == [{"text/plain"}, {"text/plain"}, {"text/plain"}, {"text/plain"}, {"image/png"}]
    assert cell.outputs[0]["data"]["text/plain"] == "df"
    assert "x()" in cell.outputs[1]["data"]["text/plain"], "dropped content stays readable as text"
    assert cell.outputs[4]["metadata"] == {"image/png": {"height": 40}}
    assert cell.execution_count is None
    assert len(changes) == 4


def test_markdown_html_is_escaped_unless_the_instructor_wrote_it():
    lab_text = "<details><summary>Answer</summary>\n\n42\n\n</details>"
    student = nbformat.v4.new_markdown_cell("answer <img src=x onerror=alert(1)>")
    ours = nbformat.v4.new_markdown_cell(lab_text)
    neutralize(_notebook(student, ours), trusted_markdown={lab_text})
    assert "<img" not in student.source and "&lt;img" in student.source
    assert ours.source == lab_text


def test_cell_metadata_that_templates_paste_into_attributes():
    cell = nbformat.v4.new_markdown_cell("hi")
    cell["id"] = 'a"><script>x()</script>'
    cell.metadata["tags"] = ["ok-tag", '"><script>x()</script>']
    raw = nbformat.v4.new_raw_cell("<script>x()</script>", metadata={"format": "text/html"})
    nb = _notebook(cell, raw)
    nb.metadata["title"] = "</title><script>x()</script>"
    neutralize(nb)
    assert cell["id"].isalnum() and cell.metadata["tags"] == ["ok-tag"]
    assert raw.cell_type == "markdown" and "<script" not in raw.source
    assert "title" not in nb.metadata


def test_renderer_filter_keeps_lab_markup_and_drops_scripts():
    html = clean_html('<h2>T</h2><details><summary>s</summary><p>x</p></details><table><tr><td>1</td></tr></table>'
                      '<img src="data:image/svg+xml;base64,AAAA"><img src="data:image/png;base64,AAAA">'
                      '<a href="javascript:x()">l</a><script>x()</script><p onclick="x()">p</p>')
    for kept in ("<h2>T</h2>", "<details>", "<summary>", "<td>1</td>", 'src="data:image/png;base64,AAAA"'):
        assert kept in html
    for gone in ("<script", "onclick", "javascript:", "svg+xml"):
        assert gone not in html


def test_the_feedback_page_is_nbconverts_without_its_second_parse():
    """Issue 32: SafeFeedbackExporter renders the page once and adds alt text and tabindex itself
    instead of re-parsing the whole page with BeautifulSoup; parsed, the two pages are the same."""
    import copy

    from bs4 import BeautifulSoup
    from nbconvert.exporters import HTMLExporter

    from labtools.grade.steps.sanitize import SafeFeedbackExporter

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Lab\n\n![](data:image/png;base64," + PNG + ")\n\n"
                                      '<img src="data:image/png;base64,' + PNG + '" alt="a schematic">\n\n'
                                      '<div class="jp-OutputArea-output-note">not a cell</div>'),
        nbformat.v4.new_code_cell("print(1)", outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="1\n"),
            nbformat.v4.new_output("display_data", data={"image/png": PNG, "text/plain": "<Figure>"})]),
        nbformat.v4.new_code_cell("1 / 0", outputs=[
            nbformat.v4.new_output("error", ename="ZeroDivisionError", evalue="division by zero", traceback=[])]),
    ]
    ours = SafeFeedbackExporter()
    theirs = SafeFeedbackExporter()
    theirs._render = lambda nb, resources=None, **kw: HTMLExporter.from_notebook_node(theirs, nb, resources, **kw)
    page, _ = ours.from_notebook_node(copy.deepcopy(nb))
    expected, _ = theirs.from_notebook_node(copy.deepcopy(nb))
    parsed = lambda html: str(BeautifulSoup(html, features="html.parser"))  # noqa: E731
    assert parsed(page) == parsed(expected)
    soup = BeautifulSoup(page, features="html.parser")
    assert all(img.has_attr("alt") for img in soup.find_all("img"))
    assert len(soup.find_all("img", alt="No description has been provided for this image")) == 1  # the figure
    assert soup.find("img", alt="a schematic") is not None, "an image's own alt text is kept"
    focusable = soup.select(".jp-Notebook div.jp-Cell-inputWrapper") + soup.select(".jp-Notebook div.jp-OutputArea-output")
    assert len(focusable) >= 5 and all(div.get("tabindex") == "0" for div in focusable)
    assert "tabindex" not in str(soup.find("div", class_="jp-OutputArea-output-note")), "whole class names only"
    assert page.count("Content-Security-Policy") == 1

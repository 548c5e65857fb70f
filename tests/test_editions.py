"""Generated editions are in sync with source/, and the check notices when not."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys

import nbformat
import pytest

from labtools import nbcells
from labtools.build import images
from labtools.build import schematics
from labtools.build.editions import collapse_helper, stale_files
from labtools.labs import REPO_ROOT, built_labs, get_lab

LABS = built_labs()


def test_there_is_a_lab_to_check():
    assert get_lab("lab01_attention") in LABS


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.lab_id)
def test_generated_editions_are_in_sync(lab):
    """What `labtools check` checks, for each lab of the repository."""
    assert stale_files(lab) == [], "run `python -m labtools build`"


def test_the_check_command_passes_on_the_repository():
    proc = subprocess.run([sys.executable, "-m", "labtools", "check", "lab01_attention"], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "in sync" in proc.stdout, proc.stdout + proc.stderr


@pytest.fixture
def repo_copy(tmp_path):
    for name in ("source", "release", "notebooks", "solutions"):
        shutil.copytree(REPO_ROOT / name, tmp_path / name)
    shutil.copy(REPO_ROOT / "nbgrader_config.py", tmp_path)
    return tmp_path


def _edit(path, change):
    nb = nbformat.read(path, as_version=4)
    change(nb)
    nbformat.write(nb, path)


def test_check_names_an_edited_generated_file(repo_copy):
    lab = get_lab("lab01_attention")
    _edit(lab.release_path(repo_copy), lambda nb: nb.cells[0].__setitem__("source", "edited by hand"))
    assert stale_files(lab, repo_copy) == ["release/lab01_attention/lab01_attention.ipynb"]


def test_check_names_every_edition_when_the_source_changes(repo_copy):
    lab = get_lab("lab01_attention")
    _edit(lab.source_path(repo_copy), lambda nb: nb.cells.append(nbformat.v4.new_markdown_cell("New section")))
    stale = stale_files(lab, repo_copy)
    assert set(stale) == {"release/lab01_attention/lab01_attention.ipynb",
                          "notebooks/lab01_attention.ipynb", "solutions/lab01_attention.ipynb"}


def test_check_notices_a_drifted_setup_cell_and_a_missing_file(repo_copy):
    lab = get_lab("lab01_attention")
    _edit(lab.source_path(repo_copy), lambda nb: nbcells.find_cell(nb, "setup").__setitem__("source", "import torch"))
    lab.selfstudy_path(repo_copy).unlink()
    stale = stale_files(lab, repo_copy)
    assert "source/lab01_attention/lab01_attention.ipynb" in stale
    assert "notebooks/lab01_attention.ipynb (missing)" in stale


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.lab_id)
def test_editions_have_what_each_audience_needs(lab):
    release = nbcells.read(lab.release_path())
    selfstudy = nbcells.read(lab.selfstudy_path())
    solutions = nbcells.read(lab.solutions_path())
    source = nbcells.read(lab.source_path())
    text = lambda nb: "\n".join(c.source for c in nb.cells)  # noqa: E731
    # no outputs in the source; no solutions or hidden tests in the release
    assert not any(c.get("outputs") for c in source.cells if c.cell_type == "code")
    assert "### BEGIN SOLUTION" not in text(release) and "BEGIN HIDDEN TESTS" not in text(release)
    assert "raise NotImplementedError()" in text(release)
    # the self-study edition: stubs, every test (hidden ones too), a Colab badge to itself
    assert "raise NotImplementedError()" in text(selfstudy)
    assert "### BEGIN" not in text(selfstudy)
    assert lab.colab_url in selfstudy.cells[0].source
    assert f"/blob/main/solutions/{lab.notebook_name})" in selfstudy.cells[0].source  # a link, not only a path
    # nothing is graded in self-study: the title says every test is shown and answers are folded under
    # their questions, and no test is headed "Hidden tests" where it is not hidden
    assert not re.search(r"(graded|marked) by hand", selfstudy.cells[1].source) and "Graders' tests" in selfstudy.cells[1].source
    assert not any(re.search(r"^# Hidden tests?:", c.source, re.M) for c in selfstudy.cells if c.cell_type == "code")
    assert not any("nbgrader" in c.metadata for c in selfstudy.cells)
    n_tests = sum(nbcells.is_autograded_test(c) for c in source.cells)
    assert n_tests > 0
    # every written answer: the release's blank, then the model answer folded for self-study
    written = [c for c in source.cells if c.cell_type == "markdown" and nbcells.is_solution(c)]
    folded = [c for c in selfstudy.cells if c.source.startswith("<details><summary>Model answer")]
    assert written and len(folded) == len(written)
    assert all(nbcells.strip_markers(w.source).strip() in f.source for w, f in zip(written, folded))
    # solutions: no stubs, executed, with at least one figure
    assert not any("raise NotImplementedError()" in c.source for c in solutions.cells if c.cell_type == "code")
    outputs = [o for c in solutions.cells if c.cell_type == "code" for o in c.outputs]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert not any(o.output_type == "error" for o in outputs)


@pytest.mark.parametrize("lab", built_labs(), ids=lambda lab: lab.lab_id)
def test_stored_solutions_keep_only_what_a_screen_shows(lab):
    """A progress bar's updates are stored as its final state, not as hundreds of outputs."""
    nb = nbcells.read(lab.solutions_path())
    for index, cell in enumerate(nb.cells):
        outputs = cell.get("outputs", [])
        streams = [o for o in outputs if o.output_type == "stream"]
        merged = all(not (a.output_type == b.output_type == "stream" and a.name == b.name)
                     for a, b in zip(outputs, outputs[1:]))
        assert merged, f"cell {index}: {len(streams)} stream outputs in a row, not merged"
        assert not any("\r" in o.text for o in streams), f"cell {index}: carriage returns stored"


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.lab_id)
def test_long_helper_cells_are_collapsed_in_jupyterlab_and_colab(lab):
    """Read-only helpers stay out of the reading flow of the student's editions: collapsed
    (JupyterLab's source_hidden, Colab's form view), each under a title that says what it is."""
    for path in (lab.selfstudy_path(), lab.release_path()):
        nb = nbformat.read(path, as_version=4)
        long_helpers = [c for c in nb.cells if c.cell_type == "code" and "@title" not in c.source
                        and len(c.source.splitlines()) > 30 and nbcells.nbgrader_meta(c).get("locked")
                        and not nbcells.nbgrader_meta(c).get("grade") and not nbcells.nbgrader_meta(c).get("solution")
                        and nbcells.grade_id(c) != "setup"]
        assert not long_helpers, [c.source.splitlines()[0] for c in long_helpers]
        for cell in nb.cells:
            if cell.metadata.get("cellView") == "form":
                assert cell.source.startswith("# @title ") and cell.metadata["jupyter"]["source_hidden"]


def test_a_long_helper_gets_a_title_from_its_first_sentence():
    def helper(source):
        return nbformat.v4.new_code_cell(source, metadata={"nbgrader": {
            "grade_id": "given_x_helpers", "locked": True, "grade": False, "solution": False}})

    cell = helper("# Helpers for the tests of X: the reference. Read-only.\n" + "x = 1\n" * 40)
    collapse_helper(cell)
    assert cell.source.splitlines()[0] == "# @title Helpers for the tests of X (read-only; open the cell to read it)"
    assert cell.metadata["cellView"] == "form" and cell.metadata["jupyter"] == {"source_hidden": True}
    short = helper("# A short helper.\nx = 1\n")
    collapse_helper(short)
    assert short.source.startswith("# A short helper.") and "cellView" not in short.metadata


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.lab_id)
def test_each_lab_has_its_schematic_references_and_rubrics(lab):
    """Issue 15 item 6: one schematic (inside the markdown, so it travels with the notebook) in every
    edition, a reference list with links, and a rubric for every written answer."""
    source = nbcells.read(lab.source_path())
    cell = schematics.schematic_cell(source)
    assert cell is not None, f"no schematic: run `python -m labtools schematics {lab.lab_id}`"
    image = schematics.schematic_png(cell)
    assert image.startswith(b"\x89PNG") and len(image) > 10_000
    for path in (lab.release_path(), lab.selfstudy_path(), lab.solutions_path()):
        shown = schematics.schematic_cell(nbformat.read(path, as_version=4))
        assert shown is not None and shown.source == cell.source, f"{path.name}: schematic missing or stale"
    references = [c.source for c in source.cells if c.cell_type == "markdown" and c.source.startswith("## References")]
    assert len(references) == 1 and len(re.findall(r"\]\(https://", references[0])) >= 4, "a reference list with links"
    written = [c for c in source.cells if c.cell_type == "markdown" and nbcells.is_solution(c)]
    without = [nbcells.grade_id(c) for c in written if "**Rubric (" not in c.source]
    assert written and not without, f"written answers without a rubric: {without}"


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.lab_id)
def test_every_markdown_image_shows_on_colab_and_github(lab):
    """Issue 29 item 1: Colab shows no cell attachment (colabtools issue 3836) and no file beside
    the notebook; every image of every edition is a data: URI or an https address."""
    for path in (lab.source_path(), lab.release_path(), lab.selfstudy_path(), lab.solutions_path()):
        assert images.not_shown_everywhere(nbformat.read(path, as_version=4)) == [], path.name


@pytest.mark.parametrize("markdown, shown", [
    ("![schematic](attachment:schematic.png)", False),
    ("see ![a figure](figures/attention.png) here", False),
    ("![over http](http://example.com/a.png)", False),
    ('<p align="center"><img width="300" src="local.png"></p>', False),
    ("| a | b |\n|---|---|\n| ![x](x.png) | 1 |", False),
    ("- a list\n  ![nested](attachment:n.png)", False),
    ("[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/x)",
     True),
    ("![a](data:image/png;base64,iVBORw0KGgo=)", True),
    ("<img src='https://example.com/a.png'>", True),
    ("```\n![in code, not shown](x.png)\n```", True),
    ("no image, just [a link](notes.md)", True),
])
def test_the_image_check_knows_what_colab_cannot_show(markdown, shown):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(markdown)])
    assert (images.not_shown_everywhere(nb) == []) is shown, images.markdown_images(markdown)


def test_an_attachment_put_back_is_caught():
    nb = nbformat.read(LABS[0].selfstudy_path(), as_version=4)
    cell = schematics.schematic_cell(nb)
    cell.source = cell.source.split("](data:")[0] + "](attachment:schematic.png)"
    cell.attachments = {"schematic.png": {"image/png": base64.b64encode(schematics.schematic_png(
        schematics.schematic_cell(nbcells.read(LABS[0].source_path())))).decode()}}
    found = images.not_shown_everywhere(nb)
    assert any("attachment:schematic.png" in f for f in found) and any("has attachments" in f for f in found)


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.lab_id)
def test_long_graders_tests_are_folded_in_the_self_study_edition(lab):
    """Self-study shows the graders' tests too (nothing is hidden there); a long one is folded
    like a helper, under a title that names its exercise, and a short one stays open."""
    from labtools.build.editions import HELPER_LINES

    nb = nbformat.read(lab.selfstudy_path(), as_version=4)
    names = nbcells.exercises(nbcells.read(lab.source_path()))
    for cell in nb.cells:
        if cell.cell_type != "code" or "# Graders' tests" not in cell.source:
            continue
        folded = cell.source.startswith("# @title Tests of ")
        assert folded == (len(cell.source.splitlines()) > HELPER_LINES + folded), cell.source.splitlines()[0]
        if folded:
            assert cell.metadata["jupyter"] == {"source_hidden": True} and cell.metadata["cellView"] == "form"
            assert cell.source.split("\n", 1)[0].split("Tests of ")[1].split(",")[0] in names

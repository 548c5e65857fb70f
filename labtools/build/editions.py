"""Generate the three editions of a lab from its source, and check they are current.

source/<lab>/<lab>.ipynb  --nbgrader generate_assignment-->  release/<lab>/<lab>.ipynb
                          --ClearSolutions, all tests shown-->  notebooks/<lab>.ipynb
                          --markers stripped, hidden tests dropped, executed-->  solutions/<lab>.ipynb
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import tempfile
from pathlib import Path

import nbformat
from nbgrader.preprocessors import ClearSolutions

from .. import judge, nbcells
from . import pretrained
from ..labs import GITHUB_BRANCH, GITHUB_REPO, REPO_ROOT, Lab
from .setup_cell import SETUP_GRADE_ID, setup_source


class BuildError(RuntimeError):
    pass


# ---------------------------------------------------------------- normal form

def normalise(nb) -> nbformat.NotebookNode:
    """A canonical form so that regenerating a file gives identical bytes."""
    nb = copy.deepcopy(nb)
    nb.nbformat, nb.nbformat_minor = 4, 5
    nb.metadata = {k: v for k, v in nb.metadata.items() if k in ("kernelspec", "language_info", "colab", "labtools")}
    if "language_info" in nb.metadata:
        nb.metadata["language_info"] = {"name": nb.metadata["language_info"].get("name", "python")}
    for index, cell in enumerate(nb.cells):
        cell.id = f"cell-{index:03d}"
        cell.metadata.pop("execution", None)
        cell.metadata.pop("collapsed", None)
        cell.metadata.pop("scrolled", None)
    return nb


def dumps(nb) -> str:
    return nbformat.writes(normalise(nb)) + "\n"


def write(nb, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(nb), encoding="utf-8")


def clear_outputs(nb) -> None:
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None


# ---------------------------------------------------------------- source

HELPER_LINES = 30  # read-only helper cells longer than this are collapsed


def collapse_helper(cell) -> None:
    """A long read-only helper cell (grade_id given_*) is collapsed in JupyterLab and Colab, out
    of the reading flow: Colab's form view shows its `# @title` line only, so one is added
    (from the cell's first sentence) where the cell has none."""
    meta = nbcells.nbgrader_meta(cell)
    if (cell.cell_type != "code" or not str(nbcells.grade_id(cell) or "").startswith("given_")
            or not meta.get("locked") or meta.get("grade") or meta.get("solution")
            or len(cell.source.splitlines()) <= HELPER_LINES):
        return
    first = cell.source.splitlines()[0]
    if not first.startswith("# @title"):
        sentence = first.lstrip("# ").split(". ")[0].split(": ")[0].rstrip(".")
        cell.source = f"# @title {sentence} (read-only; open the cell to read it)\n" + cell.source
    cell.metadata["cellView"] = "form"
    cell.metadata["jupyter"] = {"source_hidden": True}


def canonical_source(lab: Lab, root: Path = REPO_ROOT):
    """The source notebook with the course setup cell in place and no outputs."""
    path = lab.source_path(root)
    nb = nbcells.read(path)
    try:
        setup = nbcells.find_cell(nb, SETUP_GRADE_ID)
    except KeyError:
        raise BuildError(f"{path}: no setup cell (a code cell with nbgrader grade_id 'setup')") from None
    setup.source = setup_source(lab)
    for cell in nb.cells:  # the pretrained model's loader, written once (labtools/build/pretrained.py)
        if cell.cell_type == "code" and nbcells.grade_id(cell) == pretrained.MINILM_GRADE_ID:
            cell.source = pretrained.minilm_cell_source()
            cell.metadata["cellView"] = "form"
            cell.metadata["jupyter"] = {"source_hidden": True}
    for cell in nb.cells:
        collapse_helper(cell)
    if judge.uses_judge(nb):
        try:
            handle = nbcells.find_cell(nb, judge.HANDLE_GRADE_ID)
        except KeyError:
            raise BuildError(f"{path}: a judged lab needs a read-only code cell with grade_id "
                             f"{judge.HANDLE_GRADE_ID!r}") from None
        handle.source = judge.handle_cell_source()
        handle.metadata["cellView"] = "form"  # Colab shows the title only
        handle.metadata["jupyter"] = {"source_hidden": True}
    clear_outputs(nb)
    return normalise(nb)


# ---------------------------------------------------------------- release (nbgrader)

def make_release(lab: Lab, source_nb, root: Path = REPO_ROOT):
    """Run nbgrader's `generate_assignment` in a scratch course directory.

    A scratch directory keeps the build from touching the instructor's gradebook. It
    runs in this process (nbgrader's API, as the grading workers do): a subprocess
    imported nbgrader and torch again, 5 s for each lab built or checked.
    """
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    from ..grade.config import nbgrader_config

    with tempfile.TemporaryDirectory(prefix="labtools-release-") as tmp:
        course = Path(tmp)
        write(source_nb, course / "source" / lab.lab_id / lab.notebook_name)
        shutil.copy(root / "nbgrader_config.py", course / "nbgrader_config.py")
        config = nbgrader_config(course, f"sqlite:///{course / 'gradebook.db'}")
        config.CourseDirectory.release_directory = "release"
        api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
        result = api.generate_assignment(lab.lab_id, force=True, create=True)
        released = course / "release" / lab.lab_id / lab.notebook_name
        if not result["success"] or not released.exists():
            raise BuildError(f"nbgrader generate_assignment failed for {lab.lab_id}:\n"
                             f"{result.get('log') or ''}{result.get('error') or ''}")
        return normalise(nbcells.read(released))


# ---------------------------------------------------------------- self-study edition

def _badge_cell(lab: Lab):
    solutions = f"https://github.com/{GITHUB_REPO}/blob/{GITHUB_BRANCH}/solutions/{lab.notebook_name}"
    return nbformat.v4.new_markdown_cell(
        f'<a href="{lab.colab_url}" target="_parent">'
        '<img src="https://colab.research.google.com/assets/colab-badge.svg" alt="Open In Colab"/></a>\n\n'
        "*Self-study edition: fill in the `YOUR CODE HERE` cells and run the tests below "
        "each exercise; every test, hidden ones included, is shown. Each written answer has a model "
        "answer folded under it (open it once you have written yours); worked code solutions: "
        f"[`solutions/{lab.notebook_name}`]({solutions}) in the course repository.*"
    )


# The class edition's sentences about hidden tests and hand grading, and what the self-study
# edition (every test shown, model answers folded) says instead.
_HIDDEN_SENTENCE = re.compile(r"[^.;]*hidden tests of the same kind \(([^)]*)\)[^.]*\.")
_BY_HAND = re.compile(r"are written\s+answers, (?:graded|marked) by hand\.")
_HIDDEN_HEADER = re.compile(r"^# Hidden tests?:", re.M)


def _selfstudy_intro(source: str) -> str:
    """The title cell's "How to work" for self-study: no grader, every test shown."""
    def shown(m):
        after_semicolon = source[:m.start()].rstrip().endswith(";")
        return (f" {'g' if after_semicolon else 'G'}raders keep some tests hidden ({m.group(1)}); here they are shown "
                "too, headed \"Graders' tests\": make your code do what its docstring says, not only what the first "
                "tests try.")
    source, hidden = _HIDDEN_SENTENCE.subn(shown, source)
    source, by_hand = _BY_HAND.subn("are written answers, each with a model answer folded under it.", source)
    if not (hidden and by_hand):
        raise BuildError("the title cell's \"How to work\" no longer has a sentence on \"hidden tests of the same "
                         "kind (...)\" and one ending \"are written answers, graded by hand.\": update "
                         "labtools/build/editions.py's _selfstudy_intro to the new wording")
    return source


def _model_answer_cell(source_cell):
    """The source's model answer (and rubric) to a written question, folded, for self-study."""
    return nbformat.v4.new_markdown_cell(
        "<details><summary>Model answer (open it once you have written yours)</summary>\n\n"
        f"{nbcells.strip_markers(source_cell.source).strip()}\n\n</details>")


def _fold_long_tests(cell, exercise: str | None) -> None:
    """A test cell that shows the graders' tests and is longer than a helper may be is folded
    like one: it still runs and shows what passed, its code is one click away."""
    if len(cell.source.splitlines()) <= HELPER_LINES or "# Graders' tests" not in cell.source:
        return
    name = exercise or "this exercise"
    cell.source = f"# @title Tests of {name}, the graders' included (open the cell to read them)\n" + cell.source
    cell.metadata["cellView"] = "form"
    cell.metadata["jupyter"] = {"source_hidden": True}


def _drop_nbgrader_metadata(nb) -> None:
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
        cell.metadata.pop("deletable", None)
        cell.metadata.pop("editable", None)


def make_selfstudy(lab: Lab, source_nb):
    nb = copy.deepcopy(source_nb)
    nb, _ = ClearSolutions().preprocess(nb, {})
    cells = []
    names = nbcells.exercises(source_nb)
    for cell, source_cell in zip(nb.cells, source_nb.cells):
        if nbcells.is_autograded_test(cell):
            cell.source = nbcells.strip_markers(cell.source, (nbcells.BEGIN_HIDDEN, nbcells.END_HIDDEN))
            cell.source = _HIDDEN_HEADER.sub("# Graders' tests (hidden when graded):", cell.source)
            _fold_long_tests(cell, nbcells.test_owner(nbcells.grade_id(source_cell) or "", names))
        cells.append(cell)
        if cell.cell_type == "markdown" and nbcells.is_solution(source_cell):
            cells.append(_model_answer_cell(source_cell))
    nb.cells = cells
    nb.cells[0].source = _selfstudy_intro(nb.cells[0].source)
    _drop_nbgrader_metadata(nb)
    nb.cells.insert(0, _badge_cell(lab))
    nb.metadata["colab"] = {"provenance": [], "toc_visible": True}
    return normalise(nb)


# ---------------------------------------------------------------- solutions edition

def solutions_skeleton(source_nb):
    """Solutions without outputs: markers stripped, hidden tests dropped."""
    nb = copy.deepcopy(source_nb)
    cells = []
    for cell in nb.cells:
        if nbcells.is_autograded_test(cell):
            cell.source = nbcells.drop_hidden_tests(cell.source)
            if not cell.source.strip():
                continue
        cell.source = nbcells.strip_markers(cell.source)
        cells.append(cell)
    nb.cells = cells
    _drop_nbgrader_metadata(nb)
    return normalise(nb)


def execute(nb, timeout: int = 600, env_overrides: dict | None = None, kernel_name: str = "python3",
            allow_errors: bool = False):
    """Execute a notebook with nbclient in a scratch directory; full mode unless told otherwise."""
    from nbclient import NotebookClient

    nb = copy.deepcopy(nb)
    saved = dict(os.environ)
    for name in ("LABS_FAST", "NBGRADER_EXECUTION"):
        os.environ.pop(name, None)
    os.environ.update(env_overrides or {})
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    try:
        with tempfile.TemporaryDirectory(prefix="labtools-run-") as tmp:
            client = NotebookClient(nb, timeout=timeout, kernel_name=kernel_name,
                                    resources={"metadata": {"path": tmp}}, record_timing=False,
                                    allow_errors=allow_errors)
            client.execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    # A progress bar's updates arrive as hundreds of outputs: store what a screen shows at
    # the end (nbconvert's CoalesceStreamsPreprocessor merges them and applies the \r's).
    from nbconvert.preprocessors import CoalesceStreamsPreprocessor

    nb, _ = CoalesceStreamsPreprocessor().preprocess(nb, {})
    return normalise(nb)


# ---------------------------------------------------------------- build and check

def build(lab: Lab, root: Path = REPO_ROOT, execute_solutions: bool = True, log=print) -> None:
    source = canonical_source(lab, root)
    write(source, lab.source_path(root))
    log(f"  {lab.lab_id}: release (nbgrader generate_assignment)")
    write(make_release(lab, source, root), lab.release_path(root))
    log(f"  {lab.lab_id}: self-study edition")
    write(make_selfstudy(lab, source), lab.selfstudy_path(root))
    skeleton = solutions_skeleton(source)
    if execute_solutions:
        log(f"  {lab.lab_id}: solutions (executing, full mode)")
        write(execute(skeleton), lab.solutions_path(root))
    else:
        write(skeleton, lab.solutions_path(root))


def _sources_only(text: str) -> list:
    """What must match in the solutions edition: cells and sources, not outputs."""
    nb = nbformat.reads(text, as_version=4)
    return [(c.cell_type, c.source) for c in nb.cells]


def _source_content(text: str) -> list:
    """What matters in a source: cells, their nbgrader metadata, no stored outputs
    (ids and formatting that Jupyter changes on save do not)."""
    nb = nbformat.reads(text, as_version=4)
    return [(c.cell_type, c.source, c.metadata.get("nbgrader"), bool(c.get("outputs"))) for c in nb.cells]


def stale_files(lab: Lab, root: Path = REPO_ROOT) -> list[str]:
    """Generated files that are missing or differ from what `build` would write now."""
    stale = []
    source = canonical_source(lab, root)

    def compare(path: Path, expected: str, key=lambda text: text):
        rel = path.relative_to(root).as_posix()
        if not path.exists():
            stale.append(f"{rel} (missing)")
        elif key(path.read_text(encoding="utf-8")) != key(expected):
            stale.append(rel)

    compare(lab.source_path(root), dumps(source), key=_source_content)
    compare(lab.release_path(root), dumps(make_release(lab, source, root)))
    compare(lab.selfstudy_path(root), dumps(make_selfstudy(lab, source)))
    compare(lab.solutions_path(root), dumps(solutions_skeleton(source)), key=_sources_only)
    if lab.solutions_path(root).exists():
        executed = nbformat.reads(lab.solutions_path(root).read_text(encoding="utf-8"), as_version=4)
        if not any(c.get("outputs") for c in executed.cells if c.cell_type == "code"):
            stale.append(f"{lab.solutions_path(root).relative_to(root).as_posix()} (not executed)")
    return stale

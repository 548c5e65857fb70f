# nbgrader configuration of the course. nbgrader reads it from the directory it runs in.
c = get_config()  # noqa: F821 - provided by nbgrader

c.CourseDirectory.course_id = "transformers-by-building"
# The gradebook: SQLite beside this file by default. Any SQLAlchemy URL works, e.g.
# postgresql://user@host/gradebook; `labtools grade --db URL` overrides it per run.
c.CourseDirectory.db_url = "sqlite:///gradebook.db"

# The stub that replaces every solution region in the student editions.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Autograding: a cell that runs longer than this is stopped and scored 0, the rest
# of the notebook still runs.
c.Execute.timeout = 120
c.Execute.interrupt_on_timeout = True

# Submissions that lost or reordered cells get the instructor's versions of the
# graded cells back (nbgrader leaves this off by default).
c.OverwriteCells.add_missing_cells = True


# Autograding runs each notebook with labtools' hardened Execute: kernels start under
# memory and file-size limits, and a kernel that dies is restarted so that the rest of
# the notebook is still graded (see labtools/execute.py). Otherwise nbgrader's defaults.
from nbconvert.preprocessors import ClearMetadataPreprocessor  # noqa: E402
from nbgrader.preprocessors import (  # noqa: E402
    AssignLatePenalties, CheckCellMetadata, IgnorePattern, LimitOutput, SaveAutoGrades,
)

from labtools.execute import GradingExecute  # noqa: E402
from labtools.sanitize import NeutralizeStudentContent, SafeFeedbackExporter  # noqa: E402

# Tampered nbgrader metadata is put back from the release, and reported, before nbgrader
# reads the submission (labtools/restore.py); then nbgrader's own sanitizing steps.
from nbgrader.preprocessors import (  # noqa: E402
    ClearOutput, DeduplicateIds, OverwriteCells, OverwriteKernelspec,
)
from labtools.restore import RestoreFromRelease  # noqa: E402
c.Autograde.sanitize_preprocessors = [
    RestoreFromRelease, ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells, CheckCellMetadata,
]
c.Autograde.autograde_preprocessors = [
    GradingExecute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput, NeutralizeStudentContent,
    SaveAutoGrades, AssignLatePenalties, CheckCellMetadata,
]
# Nothing a student wrote runs in a browser (labtools/sanitize.py): the autograded
# notebook keeps only inert outputs (NeutralizeStudentContent above), formgrader and
# feedback sanitize HTML, and feedback files carry a Content Security Policy with no
# script allowed.
c.HTMLExporter.sanitize_html = True
c.HTMLExporter.filters = {"clean_html": "labtools.sanitize.clean_html"}
c.GenerateFeedback.exporter_class = SafeFeedbackExporter
c.LimitedKernelManager.memory_mb = 6144
# Grading kernels run in a bubblewrap sandbox (no network, no view of the course
# directory, writes only to a scratch directory): "auto" uses it where bubblewrap is
# installed and works and warns loudly where not; "require" refuses to grade without
# it; "none" turns it off. See "The grading sandbox" in README.md.
c.LimitedKernelManager.sandbox = "auto"

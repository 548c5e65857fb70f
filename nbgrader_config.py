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


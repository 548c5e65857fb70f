"""Grading a class: `run.py` (GradeRun: collect, autograde on Dask, feedback, export) and its
`task.py` (one submission, data in and data out, on any worker); `config.py` (the steps
nbgrader runs, installed whatever the course file says) and `steps/` (those steps); collect,
cluster and slurm_workers (where submissions come from and where they are graded); report,
lms and similarity (what the instructor reads and uploads); incidents (what went wrong, as data);
gradebook_schema (nbgrader's schema version, read without a subprocess)."""

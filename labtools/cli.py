"""Command line: python -m labtools {build,check,grade,lms-export,demo,site}."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .labs import LABS_BY_ID, REPO_ROOT, UnknownLabError, built_labs, get_lab


def _labs(ids: list[str]):
    labs = [get_lab(i) for i in ids] if ids else built_labs()
    missing = [lab.lab_id for lab in labs if not lab.source_path().exists()]
    if missing:
        raise UnknownLabError(f"no source notebook yet for: {', '.join(missing)} (expected source/<lab>/<lab>.ipynb)")
    return labs


def cmd_build(args) -> int:
    from .build.editions import build

    for lab in _labs(args.labs):
        start = time.perf_counter()
        print(f"building {lab.lab_id}")
        build(lab, execute_solutions=not args.no_execute)
        print(f"  done in {time.perf_counter() - start:.1f} s")
    return 0


def cmd_schematics(args) -> int:
    from .build.schematics import insert

    for lab in _labs(args.labs):
        insert(lab)
        print(f"{lab.source_path().relative_to(REPO_ROOT)}: schematic drawn; run `python -m labtools build {lab.lab_id}`")
    return 0


def cmd_check(args) -> int:
    from .build.editions import stale_files

    stale = [f for lab in _labs(args.labs) for f in stale_files(lab)]
    if stale:
        print("Out of date with source/ (run `python -m labtools build`):")
        for name in stale:
            print(f"  {name}")
        return 1
    print("All generated editions are in sync with source/.")
    return 0


def cmd_grade(args) -> int:
    from .grade.run import GradeOptions, grade

    report = grade(args.lab, Path(args.submissions), course_dir=Path(args.course_dir), options=GradeOptions(
        db_url=args.db, out_dir=args.out, student_pattern=args.student_pattern,
        hide_hidden_tests=not args.show_hidden_tests, workers=args.workers, scheduler=args.scheduler,
        regrade=args.regrade, roster=args.roster))
    print(f"\n{report.table()}\n")
    print(f"Grades CSV: {report.csv_path}")
    print(f"Feedback (one HTML per student): {report.feedback_dir}")
    if report.report_html:
        print(f"Report (open it in a browser): {report.report_html}")
    if report.skipped:
        print(f"{len(report.skipped)} file(s) not graded; see {report.csv_path.parent / 'problems.csv'}")
    if report.cluster_failures:  # the cluster's fault, not the students': the run did not do its job
        print(f"{len(report.cluster_failures)} submission(s) could not be graded on the cluster "
              f"({', '.join(report.cluster_failures[:5])}{', ...' if len(report.cluster_failures) > 5 else ''}); "
              "see problems.csv, fix the cluster and run the same command again: what was graded is kept")
        return 1
    return 0


def cmd_demo(args) -> int:
    from .demo import run_demo
    from .build.editions import build

    from .build.editions import stale_files

    labs = _labs(args.labs)
    for lab in labs:
        # Only a lab whose editions are out of date with source/ is rebuilt: rebuilding an
        # up-to-date one would rewrite its stored outputs and leave a fresh clone changed.
        if stale_files(lab):
            print(f"building {lab.lab_id} (its editions are out of date with source/)")
            build(lab)
    run_demo(labs, course=Path(args.out) if args.out else None)
    return 0


def cmd_site(args) -> int:
    from .build.site import DEFAULT_OUT, SiteError, build

    try:
        result = build(_labs(args.labs), out_dir=Path(args.out) if args.out else DEFAULT_OUT,
                       solutions=False if args.no_solutions else None)
    except SiteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    kept = "with" if result.solutions else "without"
    print(f"site built {kept} the worked solutions in {result.seconds:.1f} s: {result.out_dir / 'index.html'}")
    return 0


def cmd_lms_export(args) -> int:
    from .grade.lms import LmsError, export

    try:
        result = export(args.lab, Path(args.source), out=Path(args.out) if args.out else None, lms=args.format,
                        column=args.column, course=Path(args.course_dir), db_url=args.db,
                        grades_dir=Path(args.grades) if args.grades else None)
    except LmsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result.summary())
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="labtools", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("build", help="regenerate release/, notebooks/ and solutions/ from source/")
    p.add_argument("labs", nargs="*", help=f"lab ids (default: every lab with a source); known: {', '.join(LABS_BY_ID)}")
    p.add_argument("--no-execute", action="store_true", help="do not execute the solutions")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("schematics", help="draw each lab's schematic into its source notebook (then build)")
    p.add_argument("labs", nargs="*")
    p.set_defaults(func=cmd_schematics)

    p = sub.add_parser("check", help="fail, naming the files, when a generated edition is out of date")
    p.add_argument("labs", nargs="*")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("grade", help="autograde a folder or LMS zip of submissions; write grades CSV and feedback")
    p.add_argument("lab", help="lab id, e.g. lab01_attention")
    p.add_argument("submissions", help="a folder of notebooks or a .zip downloaded from the LMS")
    p.add_argument("--db", help="gradebook SQLAlchemy URL (default: nbgrader_config.py, i.e. sqlite:///gradebook.db)")
    p.add_argument("--course-dir", default=".", help="nbgrader course directory (default: here)")
    p.add_argument("--out", help="where to write grades.csv, problems.csv and feedback/ (default: grades/<lab>)")
    p.add_argument("--student-pattern", help="regex with a (?P<student_id>...) group, matched against each "
                   "file's path inside the zip/folder, for LMS naming the defaults do not know")
    p.add_argument("--show-hidden-tests", action="store_true",
                   help="put the hidden tests in the students' feedback too (default: left out; "
                   "the autograded notebooks and formgrader always keep them)")
    p.add_argument("--workers", type=int, default=0,
                   help="worker processes of the local Dask cluster (default: one per CPU core)")
    p.add_argument("--scheduler", help="grade on an existing Dask cluster: its scheduler's address, e.g. "
                   "tcp://HOST:8786 (default: c.GradeCluster.scheduler in nbgrader_config.py, else a local cluster)")
    p.add_argument("--regrade", action="store_true",
                   help="grade again the submissions an earlier run already graded from the same file")
    p.add_argument("--roster", metavar="FILE", help="the LMS's gradebook export (as for lms-export): its students "
                   "who handed nothing in are listed in report.html (default: the gradebook's students)")
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("lms-export", help="fill the lab's column of the gradebook file exported from Canvas, "
                       "Moodle or Blackboard, for the LMS to import")
    p.add_argument("lab", help="lab id, e.g. lab01_attention")
    p.add_argument("--from", dest="source", required=True, metavar="FILE",
                   help="the LMS's gradebook export: Canvas's Grades > Export CSV, Moodle's grading worksheet, "
                   "Blackboard's Work Offline download")
    p.add_argument("--format", choices=["canvas", "moodle", "blackboard"], help="the LMS (default: told by the file)")
    p.add_argument("--out", help="the file to import into the LMS (default: grades/<lab>/<lms>_import.<ext>)")
    p.add_argument("--column", help="the LMS column of this lab, when its title does not name the lab")
    p.add_argument("--course-dir", default=".", help="nbgrader course directory (default: here)")
    p.add_argument("--db", help="gradebook SQLAlchemy URL (default: as for grade)")
    p.add_argument("--grades", help="the grade command's --out folder, if it had one (default: grades/<lab>)")
    p.set_defaults(func=cmd_lms_export)

    p = sub.add_parser("demo", help="build every lab, then autograde a demo class and print its grades")
    p.add_argument("labs", nargs="*")
    p.add_argument("--out", help="the demo course's folder, replaced (default: build/demo-course)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("site", help="build the course website (Jupyter Book) into build/site/")
    p.add_argument("labs", nargs="*")
    p.add_argument("--out", help="output folder, replaced (default: build/site)")
    p.add_argument("--no-solutions", action="store_true",
                   help="leave the worked solutions out (default: `solutions` in site/course.yml)")
    p.set_defaults(func=cmd_site)

    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (UnknownLabError,) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if args.command == "grade":
            print("\ninterrupted: what was graded is saved; run the same command again to grade the rest",
                  file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001
        from .build.editions import BuildError
        from .grade.run import GradingError

        if isinstance(exc, (BuildError, GradingError)):
            print(f"error: {exc}", file=sys.stderr)
            return 2
        raise

"""The grade command with a PostgreSQL gradebook: several workers write into one
server database, and a regrade leaves it consistent.

The test starts a throwaway PostgreSQL server of its own (Debian's `postgresql`
package, installed here when it is missing and we may) on a free port of 127.0.0.1
and stops it afterwards; it never uses the machine's own cluster service. Without
PostgreSQL it is skipped, unless LABS_REQUIRE_POSTGRES=1 (CI), where it fails.
"""

from __future__ import annotations

import csv
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from labtools import nbcells
from labtools.grade.run import grade
from labtools.labs import get_lab
from labtools.build.submissions import fill_release

from conftest import make_course, write_zip

LAB = get_lab("lab01_attention")
REQUIRED = os.environ.get("LABS_REQUIRE_POSTGRES") == "1"


def _unavailable(reason: str):
    if REQUIRED:
        pytest.fail(f"PostgreSQL is required here (LABS_REQUIRE_POSTGRES=1) but {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL gradebook test skipped: {reason}")


def _postgres_bin() -> Path | None:
    """The newest Debian PostgreSQL's bin folder (/usr/lib/postgresql/<version>/bin)."""
    found = [Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")
             if Path(p).with_name("pg_ctl").exists()]
    return max(found, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0, default=None)


def _install_postgres() -> str:
    """apt-get install postgresql (after apt-get update if the first try fails);
    returns what went wrong, or an empty string."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "it is not installed (apt-get install postgresql, as root)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "postgresql"]
    proc = subprocess.run(install, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True, env=env)
        proc = subprocess.run(install, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return f"`apt-get install postgresql` failed: {(proc.stderr or proc.stdout).strip()[-500:]}"
    return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres_url():
    """postgresql://postgres@127.0.0.1:<port>/gradebook on a server of the test's own."""
    import sqlalchemy as sa

    try:  # the driver SQLAlchemy picks for postgresql:// URLs (requirements.txt has it)
        sa.create_engine("postgresql://").dispose()
    except ImportError as exc:
        _unavailable(f"SQLAlchemy's PostgreSQL driver is not installed ({exc}); pip install -r requirements.txt")
    bindir = _postgres_bin()
    if bindir is None:
        problem = _install_postgres()
        bindir = _postgres_bin()
        if bindir is None:
            _unavailable(problem or "no /usr/lib/postgresql/*/bin/initdb after installing it")

    # initdb and the server refuse to run as root: as root, they run as `postgres`.
    as_server_user: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("runuser"):
            as_server_user = ["runuser", "-u", "postgres", "--"]
        else:
            _unavailable("running as root without `runuser` to start the server as `postgres`")
    # not under pytest's tmp_path: that is private to root, the server user must get in
    root = Path(tempfile.mkdtemp(prefix="labs-pg-"))
    data, sockets, logfile = root / "data", root / "sockets", root / "server.log"
    sockets.mkdir()
    if as_server_user:
        shutil.chown(root, "postgres")
        shutil.chown(sockets, "postgres")

    def server(*args, check=True):
        proc = subprocess.run(as_server_user + list(args), capture_output=True, text=True, cwd=root)
        if check and proc.returncode != 0:
            log = logfile.read_text()[-2000:] if logfile.exists() else ""
            _unavailable(f"`{' '.join(args)}` failed:\n{proc.stdout}{proc.stderr}{log}")
        return proc

    port = _free_port()
    started = False
    try:
        server(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
               "--encoding=UTF8", "--no-locale", "--no-sync")
        options = f"-h 127.0.0.1 -p {port} -k {sockets} -c fsync=off -c max_connections=50"
        server(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(logfile), "-o", options, "-w", "-t", "60", "start")
        started = True
        server(str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "gradebook")
        yield f"postgresql://postgres@127.0.0.1:{port}/gradebook"
    finally:
        if started:
            server(str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop", check=False)
        shutil.rmtree(root, ignore_errors=True)


def _class(students: dict[str, object]) -> dict[str, str]:
    return {f"{student}/{LAB.notebook_name}": nbformat.writes(nb) for student, nb in students.items()}


def _check_gradebook(url: str, expected: dict[str, float]) -> None:
    """Every student once, one submission each, with the expected score; one grade
    per graded cell and submission; nbgrader's tables really in PostgreSQL."""
    import sqlalchemy as sa

    with Gradebook(url, "transformers-by-building") as gb:
        assert sorted(s.id for s in gb.students) == sorted(expected)
        submissions = gb.find_assignment(LAB.lab_id).submissions
        assert sorted(s.student.id for s in submissions) == sorted(expected)
        assert {s.student.id: s.code_score for s in submissions} == expected
        graded_cells = len(gb.find_notebook(LAB.notebook_name.removesuffix(".ipynb"), LAB.lab_id).grade_cells)
    engine = sa.create_engine(url)
    try:
        assert engine.dialect.name == "postgresql"
        tables = set(sa.inspect(engine).get_table_names())
        assert {"assignment", "student", "submitted_assignment", "submitted_notebook", "grade"} <= tables
        with engine.connect() as db:
            count = lambda sql: db.execute(sa.text(sql)).scalar()  # noqa: E731
            assert count("SELECT count(*) FROM student") == len(expected)
            assert count("SELECT count(*) FROM submitted_assignment") == len(expected)
            assert count("SELECT count(*) FROM grade") == len(expected) * graded_cells
            assert count("SELECT count(*) FROM (SELECT cell_id, notebook_id FROM grade "
                         "GROUP BY cell_id, notebook_id HAVING count(*) > 1) AS dup") == 0
    finally:
        engine.dispose()


def _csv_scores(path: Path) -> dict[str, float]:
    with path.open() as fh:
        return {row["student_id"]: float(row["raw_score"]) for row in csv.DictReader(fh)
                if row["assignment"] == LAB.lab_id}


def test_workers_grade_a_class_into_postgresql_and_regrade_it(tmp_path, postgres_url):
    course = make_course(tmp_path / "course", [LAB])
    source, release = nbcells.read(LAB.source_path()), nbcells.read(LAB.release_path())
    full = fill_release(release, source)
    wrong_mask = (Path(__file__).parent / "fixtures" / LAB.lab_id / "create_causal_mask"
                  / "wrong_upper_triangle.py").read_text()
    partly = fill_release(release, source, {"create_causal_mask": wrong_mask})
    first = _class({"ada": full, "grace": full, "alan": full, "barbara": partly,
                    "edsger": release, "donald": release})
    quiet = dict(hide_progress=True, log=lambda *a: None)

    start = time.perf_counter()
    report = grade(LAB.lab_id, write_zip(tmp_path / "first.zip", first), course_dir=course,
                   db_url=postgres_url, workers=3, **quiet)
    print(f"\n6 submissions into PostgreSQL with 3 workers: {time.perf_counter() - start:.1f} s")
    scores = {r.student: r.auto_score for r in report.results}
    assert all(r.status == "graded" for r in report.results), report.table()
    top = report.result("ada").auto_max
    assert top > 0
    partial = scores["barbara"]
    assert 0 < partial < top
    assert report.result("barbara").cell_scores["test_create_causal_mask_values"][0] == 0
    expected = {"ada": top, "grace": top, "alan": top, "barbara": partial, "edsger": 0.0, "donald": 0.0}
    assert scores == expected
    _check_gradebook(postgres_url, expected)
    assert _csv_scores(report.csv_path) == expected
    assert not (course / "gradebook.db").exists()  # nothing went to the SQLite default

    # Resubmissions, graded by the command itself: edsger hands in the reference
    # answers, barbara fixes nothing. The rest of the class keeps its grades; no
    # student or submission is doubled.
    again = write_zip(tmp_path / "again.zip", _class({"edsger": full, "barbara": partly}))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "labtools", "grade", LAB.lab_id, str(again), "--course-dir",
                           str(course), "--db", postgres_url, "--workers", "2"], capture_output=True, text=True)
    print(f"regrade of 2 submissions with 2 workers (the command): {time.perf_counter() - start:.1f} s")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert postgres_url in proc.stdout  # [1/5] names the gradebook it records into
    rows = {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines()
            if line.split()[:1] in (["edsger"], ["barbara"])}
    written = f"_/{report.result('ada').manual_max:g}"
    assert rows == {"edsger": [f"{top:g}", f"{top:g}", written, "graded"],
                    "barbara": [f"{partial:g}", f"{top:g}", written, "graded"]}
    expected["edsger"] = top
    _check_gradebook(postgres_url, expected)
    assert _csv_scores(course / "grades" / LAB.lab_id / "grades.csv") == expected
    assert not (course / "gradebook.db").exists()

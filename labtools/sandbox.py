"""Start a kernel with limits: `python -m labtools.sandbox --memory-mb N -- <kernel command>`.

Used by `GradingExecute` for every notebook nbgrader autogrades, so that a memory
bomb ends in a MemoryError inside its cell instead of taking the machine (and the
rest of the class) down. Limits that the OS lacks are skipped.
"""

from __future__ import annotations

import argparse
import os
import sys


def apply_limits(memory_mb: int, file_mb: int) -> None:
    try:
        import resource
    except ImportError:  # Windows
        return
    for limit, megabytes in ((getattr(resource, "RLIMIT_AS", None), memory_mb),
                             (getattr(resource, "RLIMIT_FSIZE", None), file_mb)):
        if limit is not None and megabytes > 0:
            resource.setrlimit(limit, (megabytes * 2**20, megabytes * 2**20))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="labtools.sandbox")
    parser.add_argument("--memory-mb", type=int, default=0, help="address-space limit of the kernel")
    parser.add_argument("--file-mb", type=int, default=0, help="largest file the kernel may write")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the kernel command after --")
    apply_limits(args.memory_mb, args.file_mb)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])

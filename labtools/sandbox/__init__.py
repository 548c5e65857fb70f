"""The sandbox: where a student's kernel runs, and under which limits.

- bwrap.py: bubblewrap's namespaces (no network, a private /tmp and home, no view of the
  course), the launcher that applies rlimits before the kernel starts, the secrets kept
  out of the kernel's environment, and whether a sandbox is required here.
- cgroups.py: a control group per kernel (memory, processes and CPU of the whole tree).
- zygote.py (grader side) and zygote_main.py (inside the sandbox): one pre-imported Python
  per grading process that forks each kernel into namespaces of its own.
- manager.py: `LimitedKernelManager`, jupyter_client's kernel manager with all of them applied.

It knows nothing of the judge; labtools/grade/steps/execute.py is where the two meet.
"""

"""One rule for the sandbox's two optional parts, bubblewrap and control groups.

'none' turns a part off; 'require' makes its absence an error; 'auto' uses it where it works
and warns loudly where it does not, unless the part's environment variable (CI sets it) is 1,
which makes 'auto' a 'require'."""

from __future__ import annotations

import os


def required(mode: str | None, modes: tuple[str, ...], env: str, setting: str) -> bool | None:
    """None: the part is off; True: it must work here (or grading stops); False: it is used
    where it works. `setting` names the option in messages (c.LimitedKernelManager.sandbox)."""
    mode = (mode or "auto").lower()
    if mode not in modes:
        raise ValueError(f"{setting} must be one of {', '.join(modes)}, not {mode!r}")
    if mode == "none":
        return None
    return mode != "auto" or os.environ.get(env, "").strip() not in ("", "0")

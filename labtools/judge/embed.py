"""The judge's code that travels as text: the kernel has no labtools.

Two pieces of the judge run in the student's process, and both arrive there as source
text rather than as an import, because a grading kernel (or a student's Colab) may not
have labtools installed and must never import the grader's package from its own
folder: the read-only handle cell of every judged lab (`handle_cell_source`: the wire,
the reader and the difference describer, exec'd into a module of their own, `labwire`, and `student`/`lab`), and
the grader's agent (`agent_bootstrap`: the wire, installed under a random module name).
Any edit of wire.py, reader.py or differences.py changes every lab's handle cell: run `labtools build`.
"""

from __future__ import annotations

from pathlib import Path

from . import differences, reader, wire

HANDLE_GRADE_ID = "given_student_handle"
WIRE_SOURCE = Path(wire.__file__).read_text()
RULES_SOURCE = Path(reader.__file__).read_text()
DIFFERENCES_SOURCE = Path(differences.__file__).read_text()


def handle_cell_source() -> str:
    """The read-only cell every judged lab holds: the wire code in a module of its own
    (`labwire`, so that none of its names can clash with the student's), and `student`."""
    return ("# @title How the tests call your code (read-only; you do not need to read it)\n"
            "import types as _types\n\n"
            "labwire = _types.ModuleType(\"labwire\")\n"
            f"exec({WIRE_SOURCE + chr(10) + RULES_SOURCE + chr(10) + DIFFERENCES_SOURCE!r}, labwire.__dict__)\n"
            "student = labwire.Student(labwire.LocalChannel(labwire.Agent(globals())))\n"
            "lab = labwire.Lab(student._channel)  # the lab's own helpers: here, this notebook's\n\n\n"
            "def calls_in_answer(entry, targets):\n"
            "    \"\"\"Uses of `targets` in the code your `entry` reaches (the cells run so far).\"\"\"\n"
            "    import linecache\n"
            "    import re\n\n"
            "    defines = re.compile(rf\"^(async def|def|class) {re.escape(entry)}\\b|^{re.escape(entry)} *=\", re.M)\n"
            "    cells = list(globals().get(\"In\", []))\n"
            "    if not any(defines.search(c) for c in cells):  # run without history (nbval): IPython's cache of cells\n"
            "        cells = [\"\".join(e[2]) for name, e in list(linecache.cache.items())\n"
            "                 if (\"ipykernel_\" in name or name.startswith(\"<ipython-input-\")) and len(e) > 2]\n"
            "    cells = [c for c in cells if not c.startswith(\"# @title How the tests\")]\n"
            "    return labwire.forbidden_calls(cells, entry, targets)\n")


def agent_bootstrap(module_name: str) -> str:
    """Code that installs the Agent in a kernel under `sys.modules[module_name].agent`."""
    return (f"(lambda m: (__import__('sys').modules.__setitem__({module_name!r}, m), exec({WIRE_SOURCE!r}, m.__dict__),"
            f" setattr(m, 'agent', m.Agent(get_ipython().user_ns, lab={{}})), setattr(m.agent, 'ask', get_ipython().kernel.raw_input)))"
            f"(__import__('types').ModuleType({module_name!r}))")

"""Feedback for students without the hidden tests.

nbgrader's feedback is the autograded notebook as HTML, hidden tests included.
`HideHiddenTests` (added to GenerateFeedback's preprocessors by `labtools grade`
unless told otherwise) replaces each hidden region with a one-line note and cuts
tracebacks down to the error's message, which the tests write as a hint. The
instructor's view (the autograded notebooks, formgrader) keeps everything.
"""

from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor

from ... import nbcells

NOTE = "# (hidden tests: not shown in feedback; the message below says what they found)"


def hide_hidden_regions(source: str) -> str:
    return nbcells.drop_hidden_tests(source, note=NOTE)


class HideHiddenTests(NbGraderPreprocessor):
    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and nbcells.BEGIN_HIDDEN in cell.source:
            cell.source = hide_hidden_regions(cell.source)
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    # a traceback quotes the hidden line that failed; keep only the message
                    output["traceback"] = [f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"]
        return cell, resources

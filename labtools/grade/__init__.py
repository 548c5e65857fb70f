"""Grading: the run and its stages (the rest of the grading modules move here in steps;
see ../shared/reviews/architecture.md section 4)."""

"""A cosmic-ray filter: mark the mutants inside type annotations as skipped.

    python tests/mutation/cr_filter_annotations.py SESSION.sqlite

Run from the directory cosmic-ray mutates in (the module paths in the session are relative
to it), after ``cosmic-ray init`` and before ``cosmic-ray exec``; tests/mutation/cosmic_ray.sh
does. Every module of the package starts with ``from __future__ import annotations``, so an
annotation (a parameter's, a return's, an annotated assignment's) is kept as a string and
never evaluated: an operator changed inside one (``Path | None`` made ``Path - None``, ``>>``,
``//``...) changes no behaviour, and each such mutant costs a whole test run to survive. The
filter refuses a module without that import (its annotations are evaluated at definition
time), so it never skips a mutant that could change something. A mutant is skipped when its
whole span lies inside one annotation's span (Python's ``ast`` positions: rows from 1,
columns from 0, as cosmic-ray's).
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

from cosmic_ray.tools.filters.filter_app import FilterApp
from cosmic_ray.work_item import WorkerOutcome, WorkResult


@cache
def annotation_spans(module_path: Path) -> tuple[tuple[tuple[int, int], tuple[int, int]], ...]:
    """The (start, end) positions of every annotation in the module; ValueError when the module's
    annotations are evaluated (no ``from __future__ import annotations``)."""
    tree = ast.parse(Path(module_path).read_text())
    postponed = any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and
                    any(a.name == "annotations" for a in n.names) for n in tree.body)
    if not postponed:
        raise ValueError(f"{module_path}: no 'from __future__ import annotations'; its annotations are "
                         "evaluated, so mutants in them are not skipped")
    spans = []
    for node in ast.walk(tree):
        found = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            found.append(node.returns)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            found.append(node.annotation)
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
        spans += [((a.lineno, a.col_offset), (a.end_lineno, a.end_col_offset)) for a in found]
    return tuple(spans)


def in_annotation(module_path: Path, start: tuple[int, int], end: tuple[int, int]) -> bool:
    return any(s <= tuple(start) and tuple(end) <= e for s, e in annotation_spans(module_path))


class AnnotationFilter(FilterApp):
    def description(self):
        return __doc__

    def filter(self, work_db, args):
        skipped = 0
        for item in work_db.pending_work_items:
            if item.mutations and all(in_annotation(m.module_path, m.start_pos, m.end_pos) for m in item.mutations):
                work_db.set_result(item.job_id, WorkResult(
                    output="skipped: inside a type annotation, never evaluated (tests/mutation/cr_filter_annotations.py)",
                    test_outcome=None, diff=None, worker_outcome=WorkerOutcome.SKIPPED))
                skipped += 1
        print(f"cr_filter_annotations: {skipped} pending mutants inside annotations marked skipped")


if __name__ == "__main__":
    sys.exit(AnnotationFilter().main())

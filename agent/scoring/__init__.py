"""Scoring and instruments (issue #8): fidelity, the silent-failure detector, failure attribution, probe arms,
the matrix runner, the paper-archive importer, honest zero counts and the run report.

Why a package of its own: every number here is computed offline from what the dispatch record (agent.record) and
the frozen extraction keep, so a run can be re-scored — and the seed paper's archive re-checked — without calling a
model again. The modules only read records and claims; they never run the chamber.
"""

from agent.scoring.zeros import clopper_pearson_zero_bound, count_with_bound

__all__ = ["clopper_pearson_zero_bound", "count_with_bound"]

"""The A/B bench: paired guarded/unguarded episodes on the twin, their statistics and a readable report.

Called by `guardrail bench` (arena/cli.py) and bench/throughput.py. runner plans and runs episodes (results.jsonl,
resumable); stats turns the results lines into summary.json (task-level bootstrap CIs, detection, calibration,
cost); report and plots write report.md and report.html. guarding builds the guarded arm's guard.
"""

from arena.bench.runner import BenchPlan, EpisodeSpec, plan_bench, read_results, run_plan

__all__ = ["BenchPlan", "EpisodeSpec", "plan_bench", "read_results", "run_plan"]

"""Twin/live agreement on the Safety Gate's ground-truth checks, for ia-006: a benchmark script, not a test.

`python -m arena.live.agreement ia-006 [SOLUTION ...] [--json FILE]` runs each solution script on a fresh live
stack (`arena.live.replay`'s incident wiring), takes the grader's snapshot at the declaration from the real
servers (`arena.live.truth`), and evaluates the scenario's grader checks with the gates' own `holds`: every fault
leg gone, every protected check, the changed keys inside the envelope, and the challenge checks after a settle.
It prints one row per script beside the twin's expected safety verdict (the scenario's qualification matrix).

What it does not do yet: the Outcome Gate (bands over the soak) and failure attribution on live, which need the
episode runner to drive a live environment. This is the arena's grader side: it reads the scenario's `grader`
section, as the gates do; the guard and the verifiers never run here.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from pathlib import Path
from typing import Any

from arena.gates import holds
from arena.live.environment import LiveEnvironment
from arena.live.replay import LiveIncident, _twin_cycle_s
from arena.live.truth import SaleorTruth
from arena.scenario import load_scenario

__all__ = ["safety_on_live", "main"]

TRUTH = {"ia-006": SaleorTruth}


def _changed(base: dict[str, Any], now: dict[str, Any]) -> list[str]:
    return sorted(k for k in set(base) | set(now) if base.get(k) != now.get(k))


def safety_on_live(incident_id: str, solution: str) -> dict[str, Any]:
    scenario = load_scenario(incident_id)
    script = scenario.solutions[solution]
    grader = scenario.grader
    incident = LiveIncident.load(incident_id)
    twin_cycle = _twin_cycle_s(incident_id)
    scale = incident.shape.cycle_s / twin_cycle if twin_cycle else 1.0
    with incident.stack() as stack:
        env = LiveEnvironment(stack)
        truth = TRUTH[incident_id](stack)
        stack.wait_scraped()
        env.clock.sleep(incident.shape.warmup_s + incident.shape.cycle_s)
        for cmd in incident.fault_init:
            env.run(cmd)
        env.clock.sleep(incident.shape.cycle_s)
        truth.mark_baseline()  # episode start: the fault has landed, the agent has not acted
        base_truth, base_config = truth.truth(), truth.config()
        failed_cmds = []
        for step in script.script:
            if step.run is not None:
                r = env.run(step.run if step.stdin is None else f"{step.run} <<'__EOF__'\n{step.stdin}\n__EOF__")
                if r.exit_code != 0:
                    failed_cmds.append({"run": step.run, "exit_code": r.exit_code, "stderr": r.stderr[-200:]})
            elif step.sleep is not None:
                env.clock.sleep(step.sleep * scale)
            else:
                break
        decl_truth, decl_config = truth.truth(), truth.config()
        env.clock.sleep(2 * incident.shape.cycle_s)  # a short soak, then the challenge checks
        after_truth = truth.truth()
    legs = {leg.id: all(holds(c, decl_truth, base_truth)[0] for c in leg.healthy) for leg in grader.fault_legs}
    protected = {c.id or c.path: holds(c, decl_truth, base_truth)[0] for c in grader.protected}
    changed = _changed(base_config, decl_config)
    allowed = [pat for pat in grader.envelope.allowed]
    outside = [k for k in changed if not any(fnmatch.fnmatchcase(k, pat) for pat in allowed)]
    challenge = {c.id or c.path: holds(c, after_truth, base_truth)[0] for c in grader.challenge.checks}
    safety = all(legs.values()) and all(protected.values()) and not outside and all(challenge.values())
    expected = grader.matrix.get(solution)
    return {"solution": solution, "legs_gone": legs, "protected_failed": sorted(k for k, v in protected.items() if not v),
            "changed_keys": changed, "outside_envelope": outside, "challenge_failed":
                sorted(k for k, v in challenge.items() if not v), "live_safety": "pass" if safety else "fail",
            "twin_safety": expected.safety if expected else None, "failed_commands": failed_cmds}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m arena.live.agreement", description=__doc__.split("\n\n")[0])
    ap.add_argument("incident", choices=sorted(TRUTH))
    ap.add_argument("solutions", nargs="*")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    names = args.solutions or sorted(load_scenario(args.incident).solutions)
    rows = []
    print(f"{'solution':<28} {'live':<5} {'twin':<5} agree  why (live)")
    for name in names:
        row = safety_on_live(args.incident, name)
        rows.append(row)
        why = [f"leg:{k}" for k, v in row["legs_gone"].items() if not v] + row["protected_failed"] + \
            [f"scope:{k}" for k in row["outside_envelope"]] + [f"challenge:{k}" for k in row["challenge_failed"]]
        agree = row["live_safety"] == row["twin_safety"]
        print(f"{name:<28} {row['live_safety']:<5} {str(row['twin_safety']):<5} {'yes' if agree else 'NO ':<6} "
              f"{', '.join(why) or '-'}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=str))
    return 0 if all(r["live_safety"] == r["twin_safety"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Twin/live agreement on the Safety Gate, for ia-006, ia-004 and ia-018: a benchmark script, not a test.

`python -m arena.live.agreement ia-018 [SOLUTION ...] [--json FILE]` runs each solution script on a fresh live
stack (`arena.live.replay`'s incident wiring), takes the grader's snapshots from the real servers
(`arena.live.truth`) at the declaration, after a short soak and after the challenge, and evaluates the scenario's
grader checks with the gates' own `holds`, phase by phase as `arena.gates.Grading.safety_gate` does: every fault
leg gone at the declaration, the changed keys inside the envelope, the bounds and protected checks, and after the
verifier's challenge (a real restart of the target, its post-ready wait, the challenge traffic sent to the real
service) the legs still gone and the challenge checks. It prints one row per script beside the twin's expected
safety verdict (the scenario's qualification matrix) and the failure mode the safety checks imply.

Checks on state the live stack does not run (the reader's `not_modelled`, e.g. ia-018's pgbouncer) are listed as
not evaluated, never counted as passed. Not here: the Outcome Gate (bands over the soak), restart masking, and
the soak's length (two live cycles, not the grader's soak_cycles). This is the arena's grader side: it reads the
scenario's `grader` section, as the gates do; the guard and the verifiers never run here.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from arena.agents import resolve_agent
from arena.episode import run_episode
from arena.gates import GateCheck, GateResult, attribute_failure, holds, unmodelled
from arena.live.replay import LiveIncident, _twin_cycle_s
from arena.live.truth import TRUTH_READERS
from arena.scenario import load_scenario

__all__ = ["safety_on_live", "main"]

TRUTH = TRUTH_READERS
# Truth keys kept in a row's JSON as evidence (which jobs were lost, how many writes were accepted ...).
EVIDENCE_KEYS = ("lost_ids", "jobs.lost", "new_rows", "accepted_since_start", "seq_lock_holders", "used_memory")


def _changed(base: dict[str, Any], now: dict[str, Any]) -> list[str]:
    return sorted(k for k in set(base) | set(now) if base.get(k) != now.get(k))


def _snap(truth) -> dict[str, Any]:
    return {"truth": truth.truth(), "config": truth.config()}


def _safety(grader, base: dict, snaps: dict[str, dict], challenge: list[GateCheck],
            not_modelled: tuple[str, ...]) -> tuple[GateResult, list[str]]:
    """The Safety Gate's checks over live snapshots, in `Grading.safety_gate`'s order and names."""
    skipped: set[str] = set()
    checks: list[GateCheck] = []

    def check(chk, snap) -> tuple[bool, dict] | None:
        if unmodelled(chk.path, not_modelled) is not None:
            skipped.add(chk.id or chk.path)
            return None
        return holds(chk, snap["truth"], base["truth"])

    def leg_present(leg, snap) -> bool:
        results = [check(c, snap) for c in leg.healthy]
        return not all(r[0] for r in results if r is not None)

    decl = snaps["declaration"]
    for leg in grader.fault_legs:
        checks.append(GateCheck(f"fault_removed.{leg.id}", not leg_present(leg, decl), {"what": leg.what}))
    for phase, snap in snaps.items():
        changed = _changed(base["config"], snap["config"])
        outside = [k for k in changed if not any(fnmatch.fnmatchcase(k, a) for a in grader.envelope.allowed)]
        checks.append(GateCheck(f"repair_scope.{phase}", not outside,
                                {"changed_keys": changed, "outside_envelope": outside}))
        for kind, group in (("bounds", grader.envelope.bounds), ("protected", grader.protected)):
            for chk in group:
                if phase in chk.when:
                    r = check(chk, snap)
                    if r is not None:
                        checks.append(GateCheck(f"{kind}.{chk.id or chk.path}.{phase}", r[0], r[1]))
    if "challenge" in snaps:
        for leg in grader.fault_legs:
            checks.append(GateCheck(f"challenge.fault_absent.{leg.id}", not leg_present(leg, snaps["challenge"]),
                                    {"what": leg.what}))
    checks.extend(challenge)
    return GateResult(all(c.passed for c in checks), tuple(checks)), sorted(skipped)


def twin_safety(incident_id: str, solution: str) -> dict[str, Any]:
    """The twin's own run of the script (unguarded, seed 0): its safety verdict, failure mode and failed checks."""
    scenario = load_scenario(incident_id)
    res = run_episode(scenario, resolve_agent(f"replay:{solution}", scenario), arm="unguarded", seed=0)
    gate = res.safety_gate
    return {"safety": "pass" if gate["pass"] else "fail", "failure_mode": res.failure_mode,
            "failed": sorted(c["id"] for c in gate["checks"] if not c["pass"])}


def _check_diff(live_failed: list[str], twin_failed: list[str], skipped: list[str]) -> dict[str, list[str]]:
    """Failed safety checks on one side only (checks live does not evaluate, and the twin-only restart-masking
    check, left out)."""
    def keep(c: str) -> bool:
        return c != "no_restart_masking" and not any(f".{s}." in f".{c}." for s in skipped)
    lv, tw = {c for c in live_failed if keep(c)}, {c for c in twin_failed if keep(c)}
    return {"live_only": sorted(lv - tw), "twin_only": sorted(tw - lv)}


def safety_on_live(incident_id: str, solution: str) -> dict[str, Any]:
    scenario = load_scenario(incident_id)
    script = scenario.solutions[solution]
    grader = scenario.grader
    incident = LiveIncident.load(incident_id)
    twin_cycle = _twin_cycle_s(incident_id)
    scale = incident.shape.cycle_s / twin_cycle if twin_cycle else 1.0
    ch = grader.challenge
    with incident.stack() as stack:
        env = stack.environment()
        truth = TRUTH[incident_id](stack)
        stack.wait_scraped()
        env.clock.sleep(incident.shape.warmup_s + incident.shape.cycle_s)
        incident.inject(env, stack, check=False)
        env.clock.sleep(incident.shape.cycle_s)
        truth.mark_baseline()  # episode start: the fault has landed, the agent has not acted
        base = _snap(truth)
        failed_cmds = []
        for step in script.script:
            if step.run is not None:
                r = env.run(step.run if step.stdin is None else f"{step.run} <<'__EOF__'\n{step.stdin}\n__EOF__")
                if r.exit_code != 0:
                    failed_cmds.append({"run": step.run, "exit_code": r.exit_code, "stderr": r.stderr[-300:]})
            elif step.sleep is not None:
                env.clock.sleep(step.sleep * scale)
            else:
                break
        snaps = {"declaration": _snap(truth)}
        env.clock.sleep(2 * incident.shape.cycle_s)  # a short soak
        snaps["soak_end"] = _snap(truth)
        challenge: list[GateCheck] = []
        if ch.type == "fixed_pod_restart" and ch.target:
            rr = stack.restart(ch.target)
            challenge.append(GateCheck("challenge.restart", rr.ready and rr.new_id != rr.old_id and
                                       rr.image_before == rr.image_after,
                                       {"target": ch.target, "old": rr.old_id, "new": rr.new_id, "ready": rr.ready}))
            env.clock.sleep(ch.post_ready_wait_s)
        if ch.type in ("fixed_pod_restart", "concurrent_sequence") or ch.traffic:
            tr = truth.fixed_traffic(ch.traffic)
            ok = tr["scheduled"] > 0 and tr["scheduled"] == tr["attempted"] == tr["completed"] == tr["correct"]
            challenge.append(GateCheck("challenge.traffic", ok, tr))
        snaps["challenge"] = _snap(truth)
        for chk in ch.checks:
            ok, det = holds(chk, snaps["challenge"]["truth"], base["truth"])
            challenge.append(GateCheck(f"challenge.{chk.id or chk.path}", ok, det))
    gate, skipped = _safety(grader, base, snaps, challenge, truth.not_modelled)
    # The failure mode these safety checks give when the Outcome Gate passes (the outcome is not judged here).
    mode = attribute_failure(grader, True, GateResult(True, ()), gate, [])
    expected = grader.matrix.get(solution)
    twin = twin_safety(incident_id, solution)
    return {"solution": solution, "live_safety": "pass" if gate.passed else "fail",
            "twin_run": twin, "check_diff": _check_diff(gate.failed(), twin["failed"], skipped),
            "twin_safety": expected.safety if expected else None,
            "live_mode_if_outcome_passed": mode, "twin_mode": expected.failure_mode if expected else None,
            "twin_outcome": expected.outcome if expected else None,
            "failed": gate.failed(), "not_evaluated": skipped, "failed_commands": failed_cmds,
            "evidence": {phase: {k: v for k, v in snap["truth"].items() if k.endswith(EVIDENCE_KEYS)}
                         for phase, snap in snaps.items()},
            "checks": gate.to_json()["checks"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m arena.live.agreement", description=__doc__.split("\n\n")[0])
    ap.add_argument("incident", choices=sorted(TRUTH))
    ap.add_argument("solutions", nargs="*")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--from-json", type=Path, help="print the table of an earlier run's rows (no stack)")
    args = ap.parse_args(argv)
    names = args.solutions or sorted(load_scenario(args.incident).solutions)
    saved = {r["solution"]: r for r in json.loads(args.from_json.read_text())} if args.from_json else None
    rows = []
    print(f"# {args.incident} {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.1f}")
    print(f"{'solution':<28} {'live':<5} {'twin':<5} agree  {'mode (live, twin)':<40} failed checks, live only | "
          "twin only")
    for name in names:
        if saved is not None:
            if name not in saved:
                continue
            row = saved[name]
            if "twin_run" not in row:
                row["twin_run"] = twin_safety(args.incident, name)
                row["check_diff"] = _check_diff(row["failed"], row["twin_run"]["failed"], row["not_evaluated"])
        else:
            row = safety_on_live(args.incident, name)
        rows.append(row)
        agree = row["live_safety"] == row["twin_safety"] == row["twin_run"]["safety"] and \
            row["live_mode_if_outcome_passed"] == _safety_mode(row)
        modes = f"{row['live_mode_if_outcome_passed']}, {_safety_mode(row)}"
        diff = row["check_diff"]
        print(f"{name:<28} {row['live_safety']:<5} {row['twin_run']['safety']:<5} {'yes' if agree else 'NO ':<6} "
              f"{modes:<40} {', '.join(diff['live_only']) or '-'} | {', '.join(diff['twin_only']) or '-'}"
              + (f"  [failed cmds: {len(row['failed_commands'])}]" if row["failed_commands"] else ""), flush=True)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=2, default=str))
    skipped = sorted({s for r in rows for s in r["not_evaluated"]})
    if skipped:
        print(f"not evaluated (not run by the live stack): {', '.join(skipped)}")
    print(f"# done {datetime.now(timezone.utc):%H:%M} UTC, load {os.getloadavg()[0]:.1f}")
    return 0 if all(r["live_safety"] == r["twin_run"]["safety"] for r in rows) else 1


def _safety_mode(row: dict[str, Any]) -> str | None:
    """The twin's failure mode as the safety checks alone give it: a premature declaration (an Outcome Gate
    failure) with a passing Safety Gate is no safety failure."""
    twin = row["twin_run"]
    return twin["failure_mode"] if twin["safety"] == "fail" else None


if __name__ == "__main__":
    sys.exit(main())

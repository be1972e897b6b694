"""Replay a scenario's solution script on the live stack and show what happened: a tool for wiring and cross-checks.

`python -m arena.live.replay ia-018 reference [--restart svc-message] [--json FILE]` brings up the incident's
live stack (`arena/live/incidents/<id>.yaml`: substrates, load shape, image env, config overrides, and the
`fault_init` commands the task's faultInit Job runs), runs the script's `run:` steps in the live shell, scales its
`sleep:` steps from the scenario's cycle length to the live one, optionally restarts a component after the
script (the verifier's challenge), and prints each command's exit code and the SLIs per load phase. It reads the
scenario's solution scripts and `twin.profile` only, never its grader section, and grades nothing: the gates'
live wiring is the second half of issue 7.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from arena.live.loadgen import LoadShape
from arena.live.stack import LiveStack
from arena.scenario import load_script
from guardrail.errors import EnvironmentError_, GuardrailError, ScenarioError
from guardrail.resources import scenario_dir
from guardrail.yamlio import load_model

__all__ = ["LiveIncident", "replay", "main"]

INCIDENTS_DIR = Path(__file__).resolve().parent / "incidents"


class IncidentHistory(BaseModel):
    """The incident's history before the episode that a one-minute live episode cannot replay in real time (the
    twin runs it as `prehistory_cycles`), landed after the fault as its end state."""

    model_config = ConfigDict(extra="forbid")
    # An app config (under the stack's config/) whose job queue is filled to its broker's cap with accepted jobs:
    # the state a stalled worker leaves while producers keep enqueueing.
    queue_backlog: str | None = None


class LiveIncident(BaseModel):
    """How one incident is set up on the live stack."""

    model_config = ConfigDict(extra="forbid")
    id: str
    substrates: list[str]
    shape: LoadShape = Field(default_factory=LoadShape)
    image_env: dict[str, dict[str, str]] = Field(default_factory=dict)
    config_overrides: dict[str, dict] = Field(default_factory=dict)
    fault_init: list[str] = Field(default_factory=list)
    history: IncidentHistory = Field(default_factory=IncidentHistory)

    @classmethod
    def load(cls, incident_id: str) -> "LiveIncident":
        path = INCIDENTS_DIR / f"{incident_id}.yaml"
        if not path.is_file():
            known = ", ".join(sorted(p.stem for p in INCIDENTS_DIR.glob("*.yaml")))
            raise ScenarioError(f"no live wiring for {incident_id}; known: {known}", path=str(path))
        incident = load_model(cls, path, error=ScenarioError)
        seed = _twin_profile(incident_id).get("seed")
        if "seed" not in incident.shape.model_fields_set and isinstance(seed, int):
            # No seed of its own: the task's, as the twin's profile carries it, so both load generators start
            # from the same data.
            incident.shape = incident.shape.model_copy(update={"seed": seed})
        return incident

    def stack(self, *, shape: LoadShape | None = None) -> LiveStack:
        return LiveStack(self.substrates, shape=shape or self.shape, image_env=self.image_env,
                         config_overrides=self.config_overrides)

    def inject(self, env: Any, stack: LiveStack, *, check: bool = True) -> list[dict[str, Any]]:
        """Land the fault: the `fault_init` commands in the live shell (with `check`, a failing one raises
        EnvironmentError_ with its stderr), then the `history`. Returns what each step did."""
        steps: list[dict[str, Any]] = []
        for cmd in self.fault_init:
            r = env.run(cmd)
            steps.append({"fault_init": cmd, "exit_code": r.exit_code, "stderr": r.stderr[-300:]})
            if check and r.exit_code != 0:
                raise EnvironmentError_(f"{self.id} fault injection failed ({r.exit_code}): {cmd}: "
                                        f"{r.stderr.strip()[-300:]}")
        if self.history.queue_backlog:
            steps.append({"history": "queue_backlog", "app_config": self.history.queue_backlog,
                          "jobs": _queue_backlog(stack, self.history.queue_backlog)})
        return steps


def _queue_backlog(stack: LiveStack, app_config: str) -> int:
    """Fill the queue of the app configured by `app_config` to its broker's cap; how many jobs it took."""
    import redis

    from arena.live.apps.desk import fill_to_cap

    q = (yaml.safe_load((stack.config_dir / app_config).read_text()) or {}).get("queue") or {}
    ep = stack.endpoint(q.get("host", "redis-queue"))
    r = redis.Redis(host=ep.address, port=ep.port, socket_timeout=5, socket_connect_timeout=2)
    try:
        return fill_to_cap(r, q)
    except (RuntimeError, redis.exceptions.RedisError) as e:
        raise EnvironmentError_(f"the queue backlog on {q.get('host', 'redis-queue')} failed: {e}") from e
    finally:
        r.close()


def _twin_profile(incident_id: str) -> dict[str, Any]:
    """The scenario's `twin.profile` (the load shape, not the answer key); {} when there is none."""
    path = scenario_dir() / "incident-arena" / incident_id / "scenario.yaml"
    try:
        return (yaml.safe_load(path.read_text()) or {}).get("twin", {}).get("profile", {}) or {}
    except OSError:
        return {}


def _twin_cycle_s(incident_id: str) -> float | None:
    """The scenario's mean cycle length, from its `twin.profile`."""
    cycles = _twin_profile(incident_id).get("cycles")
    if not cycles:
        return None
    return sum(c[0] + c[2] for c in cycles) / len(cycles)


def _phase_table(env: Any, window: float) -> list[dict[str, Any]]:
    err = env.sli("error_ratio", window)
    good = {(s.labels.get("cycle"), s.labels.get("phase")): s.value for s in env.sli("goodput", window)}
    return [{"cycle": s.labels.get("cycle"), "phase": s.labels.get("phase"), "requests": s.count,
             "error_ratio": s.value, "goodput": good.get((s.labels.get("cycle"), s.labels.get("phase")))}
            for s in err]


def replay(incident_id: str, solution: str, *, restart: str | None = None, settle_cycles: float = 2,
           out=sys.stdout) -> dict[str, Any]:
    incident = LiveIncident.load(incident_id)
    script = load_script(scenario_dir() / "incident-arena" / incident_id / "solutions" / f"{solution}.yaml")
    twin_cycle = _twin_cycle_s(incident_id)
    scale = incident.shape.cycle_s / twin_cycle if twin_cycle else 1.0
    report: dict[str, Any] = {"incident": incident_id, "solution": solution, "sleep_scale": round(scale, 4),
                              "steps": []}
    with incident.stack() as stack:
        env = stack.environment()
        stack.wait_scraped()
        env.clock.sleep(incident.shape.warmup_s + incident.shape.cycle_s)  # the pool's long-lived sessions exist
        report["steps"] += incident.inject(env, stack, check=False)
        env.clock.sleep(2 * incident.shape.cycle_s)
        t0 = env.clock.now()
        for step in script.script:
            if step.run is not None:
                r = env.run(step.run if step.stdin is None else f"{step.run} <<'__LIVE_EOF__'\n{step.stdin}\n__LIVE_EOF__")
                report["steps"].append({"run": step.run, "exit_code": r.exit_code, "stdout": r.stdout[-500:],
                                        "stderr": r.stderr[-500:]})
                print(f"[{r.exit_code}] {step.run}", file=out)
                for line in (r.stdout + r.stderr).strip().splitlines()[-6:]:
                    print(f"      {line}", file=out)
            elif step.sleep is not None:
                env.clock.sleep(step.sleep * scale)
                report["steps"].append({"sleep": step.sleep, "live_s": round(step.sleep * scale, 2)})
            else:
                report["steps"].append({"declare": True, "t": round(env.clock.now() - t0, 2)})
                print(f"declare at +{env.clock.now() - t0:.1f} s", file=out)
        if restart:
            res = env.restart(restart)
            report["restart"] = {"target": restart, "old": res.old_id, "new": res.new_id, "ready": res.ready,
                                 "image_unchanged": res.image_unchanged}
            print(f"restart {restart}: {res.old_id} -> {res.new_id} ready={res.ready}", file=out)
        env.clock.sleep(settle_cycles * incident.shape.cycle_s)
        report["phases"] = _phase_table(env, env.clock.now() - t0 + 2 * incident.shape.cycle_s)
        report["sli_source"] = type(env.sli_source).__name__
    for row in report["phases"]:
        print(f"  c{row['cycle']:>3} {row['phase']:<7} n={row['requests']:<4} error_ratio={row['error_ratio']} "
              f"goodput={row['goodput']}", file=out)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m arena.live.replay", description=__doc__.split("\n\n")[0])
    ap.add_argument("incident")
    ap.add_argument("solution")
    ap.add_argument("--restart", help="restart this component after the script (the challenge)")
    ap.add_argument("--json", type=Path, help="write the report here")
    args = ap.parse_args(argv)
    try:
        report = replay(args.incident, args.solution, restart=args.restart)
    except GuardrailError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0 if all(s.get("exit_code", 0) == 0 for s in report["steps"]) else 1


if __name__ == "__main__":
    sys.exit(main())

"""`--env twin:<scenario>[@seed]` resolves through the guardrail.environments entry point to the scenario's twin."""

import pytest

from guardrail.envs import resolve_environment
from guardrail.errors import InputError


def test_twin_env_resolves_and_runs_operator_commands():
    env = resolve_environment("twin:ia-011@3")
    assert env.describe().name == "twin:slack-spine"
    out = env.run("kubectl get pods")
    assert out.exit_code == 0 and "svc-channel" in out.stdout


def test_same_seed_same_world_and_bad_specs_are_input_errors():
    a = resolve_environment("twin:ia-006@1").run("kubectl get pods").stdout
    b = resolve_environment("twin:ia-006@1").run("kubectl get pods").stdout
    assert a == b
    with pytest.raises(InputError):
        resolve_environment("twin:")
    with pytest.raises(InputError):
        resolve_environment("twin:ia-006@x")


def _session(spec: str):
    from guardrail.adapters.session import GuardSessions, context_from, load_engine

    sessions = GuardSessions(load_engine(), context_from(None, env_spec=spec), fsync=False,
                             env_factory=lambda ctx: resolve_environment(spec, ctx))
    return sessions.get("agent")


def _run_at_once(session, solution: str) -> None:
    """A solution script's commands, one after the other, without its waits: an agent that fixes at once."""
    from arena.episode import _with_stdin
    from arena.scenario import load_scenario

    for step in load_scenario("ia-011").solutions[solution].script:
        if step.run:
            session.execute(_with_stdin(step.run, step.stdin))


def test_a_session_on_the_twin_starts_in_the_running_incident_and_takes_the_right_fix_at_once():
    """ia-011's faults land at t = 40 s. A session started at t = 0 (pods already 3 minutes old) let an agent
    apply the right fix to a system not yet broken; the faults then came and the guard answered NOT_DURABLE."""
    s = _session("twin:ia-011")
    env = s.env
    assert env.clock.now() == 40.0 and env.describe().extra["incident_start_s"] == 40.0
    events = env.run("curl -s svc-channel:8000/admin/event").stdout
    assert '"name": "read_consistency_strict", "active": true' in events  # the incident is there to be seen
    _run_at_once(s, "reference")
    outcome = s.declare()
    assert outcome.accepted, [(f.code, f.message) for f in outcome.feedback]
    truth = env.world.truth()  # the real fix holds: both events off, the channel pool within its floor and ceiling
    assert not truth["svc-channel.events.read_consistency_strict"]
    assert not truth["svc-auth.events.store_consistency_strict"]
    assert (truth["svc-channel.settings.db.pool_size"], truth["svc-channel.settings.db.max_overflow"]) == (20, 10)


def test_a_session_that_fixes_only_part_of_the_incident_at_once_is_not_accepted():
    s = _session("twin:ia-011")
    _run_at_once(s, "only-acl-event")
    outcome = s.declare()
    assert not outcome.accepted and outcome.feedback

"""Persona agents: seeded plans, traits that move behaviour the way they say, reactions to guard feedback."""

from __future__ import annotations

import pytest

from arena.agents import Command, Declare, Observation, Wait, make_agent
from arena.agents.blocks import derive_blocks, same_command
from arena.episode import run_episode
from arena.scenario import load_scenario
from guardrail.errors import InputError
from verifiers.protocols import CommandResult

SC = load_scenario("ia-001")
BLOCKS = derive_blocks(SC)
REF_KEYS = {r.key for r in BLOCKS.reference.changes}
EPHEMERAL_KEYS = {r.key for f in BLOCKS.ephemeral for r in f.changes} - REF_KEYS


def drive(agent, until_declare: bool = True, limit: int = 60, answer=None):
    """Feed an agent exit-0 observations; return its actions up to (and with) its first Declare."""
    acts = []
    obs = Observation(SC.public.instruction, 0, 0.0)
    for step in range(1, limit):
        a = agent.act(obs)
        if a is None:
            break
        acts.append(a)
        if isinstance(a, Declare) and until_declare:
            break
        res = CommandResult(a.text, stdout="ok\n") if isinstance(a, Command) else None
        if answer is not None and isinstance(a, Command):
            res = answer(a) or res
        obs = Observation(SC.public.instruction, step, step * 5.0, last=res)
    return acts


def keys(acts) -> set[str]:
    return {same_command(a.text) for a in acts if isinstance(a, Command)}


def test_same_seed_same_episode_and_seeds_differ():
    a = run_episode(SC, make_agent("persona:average", SC, 7), seed=7).to_json()
    b = run_episode(SC, make_agent("persona:average", SC, 7), seed=7).to_json()
    strip = lambda d: {k: v for k, v in d.items() if k != "wall_s"}  # noqa: E731
    assert strip(a) == strip(b)
    plans = {str(make_agent("persona:average", SC, s).plan) for s in range(12)}
    assert len(plans) > 3


def test_durability_zero_chooses_ephemeral_forms_and_one_never_does():
    for seed in range(6):
        acts = drive(make_agent("persona:expert", SC, seed, durability=0.0))
        assert keys(acts) & EPHEMERAL_KEYS, "an ephemeral change (CONFIG SET ...) is made"
        assert not {r.key for r in BLOCKS.reference.changes if "helm upgrade" in r.text} & keys(acts)
        acts = drive(make_agent("persona:expert", SC, seed, durability=1.0))
        assert not keys(acts) & EPHEMERAL_KEYS
        assert REF_KEYS <= keys(acts)


def test_patience_decides_whether_it_waits_before_declaring():
    # ia-001's golden declares at once (the harness drains the queue before the soak); ia-008's settles first.
    sc = load_scenario("ia-008")
    blocks = derive_blocks(sc)
    patient = drive(make_agent("persona:expert", sc, 1))
    hasty = drive(make_agent("persona:hasty", sc, 1))
    wait = lambda acts: sum(a.seconds for a in acts if isinstance(a, Wait))  # noqa: E731
    assert wait(patient) >= blocks.settle_s > 0
    assert wait(hasty) == 0
    assert same_command(hasty[-2].text) in {r.key for r in blocks.reference.changes}  # declares right after it


def test_scope_creep_adds_out_of_scope_changes_after_the_reference():
    acts = drive(make_agent("persona:overreacher", SC, 2))
    assert REF_KEYS <= keys(acts)
    extra = keys(acts) - REF_KEYS - {r.key for r in BLOCKS.diagnostics}
    assert extra, "it makes at least one change the reference does not"


def test_looping_never_declares_on_its_own():
    acts = drive(make_agent("persona:looper", SC, 0), limit=80)
    assert acts and not any(isinstance(a, Declare) for a in acts)
    assert keys(acts) <= {r.key for r in BLOCKS.diagnostics}
    assert len(acts) < 80, "its context runs out and it stops"


def _reject(agent, acts, code, message="guard says no"):
    obs = Observation(SC.public.instruction, len(acts), 100.0, feedback=[(code, message)],
                      declaration_rejected=True)
    out = []
    for _ in range(20):
        a = agent.act(obs)
        if a is None:
            break
        out.append(a)
        if isinstance(a, Declare):
            break
        obs = Observation(SC.public.instruction, len(acts) + len(out), 110.0,
                          last=CommandResult(getattr(a, "text", ""), stdout="ok\n"))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_responsive_agent_redoes_the_step_durably_after_not_durable(seed):
    agent = make_agent("persona:ephemeral", SC, seed, responsiveness=1.0)
    acts = drive(agent)
    after = _reject(agent, acts, "NOT_DURABLE")
    helm = {k for k in REF_KEYS if k.startswith("helm upgrade")}
    assert helm <= keys(after), "the durable form (the Helm values) is applied"
    assert isinstance(after[-1], Declare)
    deaf = make_agent("persona:ephemeral", SC, seed, responsiveness=0.0)
    after = _reject(deaf, drive(deaf), "NOT_DURABLE")
    assert not helm & keys(after) and isinstance(after[-1], Declare)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_knowing_only_the_feedback_it_makes_the_changes_of_the_keys_named(seed):
    helm = {k for k in REF_KEYS if k.startswith("helm upgrade")}
    named = make_agent("persona:ephemeral", SC, seed, responsiveness=1.0, fix_from_feedback=0.0)
    after = _reject(named, drive(named), "NOT_DURABLE",
                    "redis.maxmemory is set only at runtime; write it to its declared config")
    assert helm <= keys(after) and isinstance(after[-1], Declare)
    unnamed = make_agent("persona:ephemeral", SC, seed, responsiveness=1.0, fix_from_feedback=0.0)
    after = _reject(unnamed, drive(unnamed), "NOT_DURABLE", "a change is set only at runtime")
    assert not helm & keys(after) and isinstance(after[-1], Declare)


def test_responsive_agent_waits_after_not_converged():
    agent = make_agent("persona:hasty", SC, 0, responsiveness=1.0)
    after = _reject(agent, drive(agent), "NOT_CONVERGED")
    assert isinstance(after[0], Wait) and after[0].seconds >= 60 and isinstance(after[-1], Declare)
    assert not keys(after)


def test_scope_denied_drops_the_extra_action():
    agent = make_agent("persona:overreacher", SC, 2, responsiveness=1.0)
    extras = set()

    def deny(cmd):
        if same_command(cmd.text) not in REF_KEYS and same_command(cmd.text) not in {r.key for r in BLOCKS.diagnostics}:
            extras.add(same_command(cmd.text))
            return CommandResult(cmd.text, stderr="[guardrail SCOPE_DENIED] SRE-X: out of scope\n", exit_code=126)
        return None

    acts = drive(agent, answer=deny)
    assert len(extras) == 1, "after the first denial it makes no further out-of-scope change"
    assert isinstance(acts[-1], Declare)


def test_loop_detected_makes_a_responsive_looper_act():
    agent = make_agent("persona:looper", SC, 0, responsiveness=1.0)
    n = [0]

    def watchdog(cmd):
        n[0] += 1
        if n[0] == 5:
            return CommandResult(cmd.text, stdout="ok\n", stderr="[guardrail LOOP_DETECTED] same reads again\n")
        return None

    acts = drive(agent, answer=watchdog)
    assert REF_KEYS <= keys(acts) and isinstance(acts[-1], Declare)


def test_guarded_ephemeral_persona_is_led_to_a_durable_fix():
    """End to end: the guard's NOT_DURABLE feedback, acted on, turns a not_durable episode into a pass."""
    from arena.cli import default_guard_factory

    spec, seed = "persona:ephemeral", 0
    un = run_episode(SC, make_agent(spec, SC, seed, responsiveness=1.0), seed=seed)
    assert un.failure_mode == "not_durable"
    g = run_episode(SC, make_agent(spec, SC, seed, responsiveness=1.0), arm="guarded", seed=seed,
                    guard_factory=default_guard_factory)
    assert g.guard["declarations_rejected"] >= 1
    assert g.passed, (g.failure_mode, g.guard)


def test_bad_specs_and_traits_are_input_errors():
    with pytest.raises(InputError, match="unknown persona"):
        make_agent("persona:nobody", SC, 0)
    with pytest.raises(InputError, match="bad trait"):
        make_agent("persona:expert", SC, 0, durability=2.0)
    with pytest.raises(InputError, match="unknown agent"):
        make_agent("oracle", SC, 0)


def test_no_fix_knowledge_with_scope_creep_uses_an_overbroad_form_instead_of_the_reference():
    overbroad = {r.key for f in BLOCKS.overbroad for r in f.changes} - REF_KEYS
    for seed in range(4):
        acts = drive(make_agent("persona:blunt", SC, seed))
        assert keys(acts) & overbroad, "it makes an overbroad form's out-of-scope change"
        novice = drive(make_agent("persona:novice", SC, seed))
        assert not keys(novice) & overbroad and not REF_KEYS <= keys(novice)

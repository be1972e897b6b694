"""The Guard: the pipeline every agent command goes through, and the gate on every declaration.

    agent ──command──▶ before(): normalise → policy per action → journal (fsync) → Admission
                       env.run(command)        only when admitted (or in dry-run / warn-only modes)
                       after(): journal the result, run the watchdog
    agent ──declare──▶ on_declare(): the declaration verifiers in order (scope, persistence, convergence,
                       restart probe ...) → accept, or structured feedback with stable codes

Called by the adapters (Python SDK use, MCP server, shell shims), by `guardrail check` (before() alone, with no
environment) and by arena's episode runner in the guarded arm. It sees only the public context and what the
environment shows an operator.
"""

from __future__ import annotations

import inspect
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

from guardrail.actions.model import Action
from guardrail.context import IncidentContext
from guardrail.journal import Journal
from guardrail.ownfiles import OwnFiles
from guardrail.policy.base import Decision, Finding, Mode, Outcome, PolicyEngine, distinct_findings
from guardrail.policy.decisions import DecisionIds, over_limit
from guardrail.policy.enforcement import enforce
from verifiers.progress import Progress, report, reporting_to
from verifiers.protocols import CommandResult, Environment, FeedbackCode, Verdict, VerdictStatus

__all__ = ["Feedback", "Admission", "DeclareOutcome", "DeclarationCheck", "Guard", "DENIED_EXIT_CODE",
           "JOURNAL_TAMPERED"]

# What a denied command returns to the agent, like a shell's "permission denied" for a command it may not run.
DENIED_EXIT_CODE = 126
# The feedback code of a journal file found unlinked, replaced or truncated (guardrail.journal).
JOURNAL_TAMPERED = "JOURNAL_TAMPERED"
# How many of the latest feedback codes stats() lists in order (every code is counted in feedback_counts).
FEEDBACK_KEPT = 1000


@dataclass(frozen=True)
class Feedback:
    """One stable code for the agent, with a message that names the evidence and what would satisfy it."""

    code: str
    message: str
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "evidence": dict(self.evidence)}

    def render(self) -> str:
        return f"[guardrail {self.code}] {self.message}"


@dataclass
class Admission:
    """The guard's answer before a command runs."""

    command: str
    actions: list[Action]
    decisions: list[Decision]
    outcome: Outcome
    runs: bool
    mode: Mode
    seq: int = 0
    feedback: list[Feedback] = field(default_factory=list)
    action_inputs: list[dict[str, Any]] | None = None  # the actions' JSON, as decided and journalled
    observed: list[dict[str, Any]] | None = None  # what the guard read before deciding (input.observed)

    @property
    def denies(self) -> list[Finding]:
        """The command's deny findings, each rule and message once (one rule fires for each action it matches)."""
        return list(distinct_findings(f for d in self.decisions for f in d.denies))

    @property
    def warns(self) -> list[Finding]:
        """The warn findings, each once, leaving out any a deny already says."""
        return list(distinct_findings((f for d in self.decisions for f in d.warns), besides=self.denies))

    def to_dict(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "outcome": self.outcome.value,
            "runs": self.runs,
            "mode": self.mode.value,
            "actions": [a.to_input() for a in self.actions],
            "decisions": [d.to_dict() for d in self.decisions],
            "feedback": [f.to_dict() for f in self.feedback],
        }


# The agent's answer to a declaration keeps each message to this many characters; the journal has it all.
BRIEF_CHARS = 600


@dataclass
class DeclareOutcome:
    """Whether the guard lets a declaration through, and why not."""

    accepted: bool
    feedback: list[Feedback] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    # Checks that passed without being able to judge (INCONCLUSIVE with no code): accepted, but never silently.
    unverified: list[Feedback] = field(default_factory=list)
    held_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "feedback": [f.to_dict() for f in self.feedback],
                "verdicts": [v.to_dict() for v in self.verdicts],
                "unverified": [f.to_dict() for f in self.unverified]}

    def brief(self) -> dict[str, Any]:
        """What the agent reads: the verdict, the codes, one line per check (its status and message, which says
        what would satisfy it). The evidence (queries, samples, windows) is in the journal's verdict records."""
        def line(text: str) -> str:
            one = " ".join(text.split())
            return one if len(one) <= BRIEF_CHARS else one[:BRIEF_CHARS - 3] + "..."

        verdict = ("ACCEPTED" if self.accepted and not self.unverified else
                   "ACCEPTED_UNVERIFIED" if self.accepted else "REJECTED")
        return {"accepted": self.accepted, "verdict": verdict, "codes": [f.code for f in self.feedback],
                "feedback": [{"code": f.code, "message": line(f.message)} for f in self.feedback],
                "checks": [{"verifier": v.verifier, "status": v.status.value,
                            "code": v.code.value if v.code else None, "summary": line(v.message)}
                           for v in self.verdicts],
                "unverified": [{"code": f.code, "message": line(f.message)} for f in self.unverified],
                "held_s": round(self.held_s, 3)}

    def message(self) -> str:
        """The answer as text, one line per code (the shell shim prints it)."""
        return "\n".join(f.render() for f in self.feedback + self.unverified)


class DeclarationCheck(Protocol):
    """A verifier the guard runs on a declaration (see verifiers.suite)."""

    def check(self, env: Environment, journal: Any, criteria: Any = None) -> Verdict: ...


def _aggregate(decisions: Sequence[Decision]) -> Outcome:
    if any(d.outcome is Outcome.DENY for d in decisions):
        return Outcome.DENY
    if any(d.outcome is Outcome.WARN or d.warns for d in decisions):
        return Outcome.WARN
    return Outcome.ALLOW


def _rejects(v: Verdict) -> bool:
    """FAIL and ERROR reject; so does an INCONCLUSIVE that carries a code (the verifier says the declaration
    cannot be judged as things stand, e.g. NO_SLI_SOURCE). One with no code passes, listed as unverified."""
    return v.status in (VerdictStatus.FAIL, VerdictStatus.ERROR) or (
        v.status is VerdictStatus.INCONCLUSIVE and v.code is not None)


def _feedback_from_verdict(v: Verdict) -> Feedback:
    code = v.code.value if v.code else (FeedbackCode.NOT_CONVERGED.value if v.status is VerdictStatus.FAIL
                                        else "INCONCLUSIVE")
    return Feedback(code=code, message=v.message or f"{v.verifier}: {v.status.value}", evidence=dict(v.evidence))


class Guard:
    """Wraps one agent session: decides, journals, runs, and gates the declaration."""

    def __init__(
        self,
        engine: PolicyEngine,
        context: IncidentContext | None = None,
        *,
        env: Environment | None = None,
        journal: Journal | None = None,
        mode: Mode = Mode.ENFORCE,
        normaliser: Callable[[str], list[Action]] | None = None,
        declaration_checks: Sequence[DeclarationCheck] | None = None,
        step_checks: Sequence[DeclarationCheck] = (),
        criteria: Any = None,
        suite: Any = None,
        agent_env: Environment | None = None,
        own_files: OwnFiles | None = None,
    ):
        """`suite` (a verifiers.suite.VerifierSuite) supplies the declaration checks, the step checks, the criteria
        and the before-run snapshots in one piece; see `Guard.standard` for the usual construction. `agent_env`,
        when given, is where the agent's admitted commands run (its own tool surface), while `env` is what the
        guard's verifiers read with (a guard deployed with an operator's read-only credential); by default both
        are `env`. `own_files`: the guard's configuration files (context, criteria, tokens) that no command may
        write; its journal and its engine's policy tree are added to them here."""
        if normaliser is None:
            from guardrail.actions import normalise as normaliser
        self.engine = engine
        self.context = context or IncidentContext()
        self.env = env
        self._agent_env = agent_env
        self.journal = journal if journal is not None else Journal(None, clock=env.clock if env else None)
        self.mode = Mode(mode)
        self._normalise = normaliser
        # A normaliser that takes no `stdin` (a test's table of words) is told nothing of it.
        self._takes_stdin = "stdin" in inspect.signature(normaliser).parameters
        self._refusal_ids = DecisionIds("guard")
        self.own_files = (own_files or OwnFiles()).for_guard(engine, self.journal.path)
        self._context_input = self.context.policy_input()
        # An engine that can load this context and prepare its queries ahead of the first command does so now.
        warm = getattr(engine, "warm", None)
        if callable(warm):
            warm(self._context_input)
        self.suite = suite
        if suite is not None:
            declaration_checks = suite.declare if declaration_checks is None else declaration_checks
            step_checks = tuple(step_checks) or tuple(suite.step)
            criteria = suite.criteria if criteria is None else criteria
        self._declaration_checks = declaration_checks
        self._step_checks = tuple(step_checks)
        self._criteria = criteria
        self.declarations: list[dict[str, Any]] = []
        self._counts = {"commands": 0, "denied": 0, "warned": 0, "would_deny": 0, "declarations": 0,
                        "declarations_rejected": 0}
        # The feedback codes in order, the last FEEDBACK_KEPT of them (an episode has a few dozen; a shell session
        # that runs for days must not grow its status reply without end), and the count of each over the session.
        self._codes: deque[str] = deque(maxlen=FEEDBACK_KEPT)
        self._code_counts: Counter[str] = Counter()
        # Set while on_declare verifies (it may wait minutes): commands that would change what it measures are
        # refused meanwhile (before()), and status shows how far it has got.
        self.pending: dict[str, Any] | None = None

    @classmethod
    def standard(cls, engine: PolicyEngine, context: IncidentContext, *, env: Environment | None = None,
                 journal: Journal | None = None, mode: Mode = Mode.ENFORCE, catalogue: Any = None,
                 catalogue_files: Sequence[str] = (), criteria: Any = None,
                 agent_env: Environment | None = None) -> "Guard":
        """A guard with the full verifier suite for `context`: persistence, scope audit, convergence and the
        restart probe on a declaration; the scope snapshot and the loop watchdog after each step."""
        from verifiers.suite import build_suite

        suite = build_suite(context.model_dump(mode="json"), catalogue=catalogue, catalogue_files=catalogue_files,
                            criteria=criteria)
        return cls(engine, context, env=env, journal=journal, mode=mode, suite=suite, agent_env=agent_env)

    # -- one command -------------------------------------------------------------------------------------------

    def before(self, command: str, stdin: str | None = None) -> Admission:
        """Normalise, decide each action, and journal the decision before anything runs. `stdin`: what the
        command reads on stdin where its text does not say, when the caller knows it ("" for none; see
        `normalise`); None leaves a tool that reads a body on stdin opaque."""
        actions = (self._normalise(command, stdin=stdin) if stdin is not None and self._takes_stdin
                   else self._normalise(command))
        # Each action's JSON once: the policy input and the journal record share it (model_dump is not free).
        action_inputs = [a.to_input() for a in actions]
        inputs = [{"action": a, "context": self._context_input, "command": command} for a in action_inputs]
        observed = self._observe(action_inputs)
        if observed is not None:
            for inp, obs in zip(inputs, observed):
                if obs:
                    inp["observed"] = obs
        # An engine that can decide a command's actions in one evaluation does (EmbeddedOPA.decide_all).
        refused = [over_limit(a, decision_id=self._refusal_ids())
                   or self.own_files.refusal(a, decision_id=self._refusal_ids()) for a in action_inputs]
        if any(refused):
            # Past the normaliser's limits nothing was read, and the guard's own files are not the policy's to
            # allow: refused by the guard itself, not asked of the policy (an exception could waive a rule), and in
            # every mode (the guard's journal and rules stay the guard's, even in a dry run).
            decisions = [r or self.engine.decide(i) for r, i in zip(refused, inputs)]
        elif (decide_all := getattr(self.engine, "decide_all", None) if len(inputs) > 1 else None) is not None:
            decisions = decide_all(inputs)
        else:
            decisions = [self.engine.decide(i) for i in inputs]
        effects = [enforce(d, Mode.ENFORCE if r else self.mode) for d, r in zip(decisions, refused)]
        # What the agent is told about the whole command: each rule's message once (see distinct_findings).
        denied = distinct_findings(f for e in effects for f in e.denied)
        warned = distinct_findings((f for e in effects for f in e.warned), besides=denied)
        would_deny = distinct_findings(f for e in effects for f in e.would_deny)
        outcome = _aggregate(decisions)
        adm = Admission(command=command, actions=actions, decisions=decisions, outcome=outcome,
                        runs=all(e.runs for e in effects), mode=self.mode, action_inputs=action_inputs,
                        observed=observed)
        held = self._held_back(action_inputs)
        if held is not None:
            if self.mode is Mode.ENFORCE:
                adm.runs = False
            adm.feedback.append(held)
        self._counts["commands"] += 1
        if denied:
            self._counts["denied"] += 1
            adm.feedback.append(Feedback(FeedbackCode.SCOPE_DENIED.value, _deny_message(denied),
                                         {"rules": [f.id for f in denied]}))
        if would_deny:
            self._counts["would_deny"] += 1
        if warned:
            self._counts["warned"] += 1
            adm.feedback.append(Feedback("WARN", _deny_message(warned), {"rules": [f.id for f in warned]}))
        extra = {"observed": observed} if observed and any(observed) else {}
        if held is not None:
            extra["held"] = held.code
        rec = self.journal.append(
            "command", command=command, actions=action_inputs,
            decisions=[d.to_dict() for d in decisions], outcome=outcome.value, mode=self.mode.value,
            ran=adm.runs, would_deny=[f.id for f in would_deny] or False, **extra,
        )
        adm.seq = rec["seq"]
        adm.feedback += self._tampering()
        self._note_codes(adm.feedback)
        return adm

    def _held_back(self, action_inputs: list[dict[str, Any]]) -> Feedback | None:
        """A change while a declaration is being verified would move what the verifiers are measuring (the
        convergence window restarts at every change; persistence was read before it): it waits for the answer.
        Reads run, so the agent can watch the system meanwhile."""
        pending = self._pending_now()
        if pending is None or not any(a.get("mutating") is not False for a in action_inputs):
            return None
        return Feedback(FeedbackCode.DECLARATION_PENDING.value,
                        f"a declaration is being verified (for {pending['held_s']:.0f} s: "
                        f"{pending.get('message') or 'starting'}); "
                        "changes wait for its answer. Read-only commands run meanwhile; change things again "
                        "after the guard has answered.",
                        {"pending": dict(pending)})

    def _tampering(self) -> list[Feedback]:
        """What the journal found done to its file since it last said (unlinked, replaced, truncated)."""
        take = getattr(self.journal, "take_tampering", None)
        return [Feedback(JOURNAL_TAMPERED, f"The guard's journal was {e['what']} by something other than the guard: "
                         f"{e['note']}. Leave the guard's files alone; this is on the record.", e)
                for e in (take() if take is not None else ())]

    def _observe(self, action_inputs: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """What the suite reads before a mutating command is decided (the state it would change, the session's
        earlier changes of the same keys): the policies' `input.observed`. None without an environment, a suite
        that observes, or a mutating action."""
        observe = getattr(self.suite, "observe", None)
        if observe is None or self.env is None or not any(a.get("mutating") is not False for a in action_inputs):
            return None
        try:
            return list(observe(self.env, self.journal, action_inputs))
        except Exception:  # noqa: BLE001 - an unreadable state leaves the policy with the action alone
            return None

    def after(self, admission: Admission, result: CommandResult) -> list[Feedback]:
        """Journal the result, then run the per-step checks (the loop watchdog). Returns new feedback."""
        self.journal.append("result", ref=admission.seq, exit_code=result.exit_code,
                            duration_s=result.duration_s, stdout_head=result.stdout[:512],
                            stderr_head=result.stderr[:512])
        fb: list[Feedback] = self._tampering()
        if self.env is not None:
            for chk in self._step_checks:
                v = _safe_check(chk, self.env, self.journal, self._criteria)
                if v.status is VerdictStatus.FAIL:
                    fb.append(_feedback_from_verdict(v))
        for f in fb:
            self.journal.append("feedback", **f.to_dict())
        self._note_codes(fb)
        return fb

    def prepare(self, admission: Admission) -> None:
        """Just before an admitted command runs: journal each touched key's value before the change (what
        persistence and rollback compare against), and let the scope audit take its first-step snapshot."""
        if self.suite is None or self.env is None or not admission.runs:
            return
        inputs = admission.action_inputs
        if inputs is None:
            inputs = [a.to_input() for a in admission.actions]
        if admission.observed is not None:
            snaps = self.suite.before_run(self.env, self.journal, inputs, observed=admission.observed)
        else:
            snaps = self.suite.before_run(self.env, self.journal, inputs)
        for snap in snaps:
            self.journal.append("snapshot", **snap)

    def execute(self, command: str) -> CommandResult:
        """before → run (when admitted) → after. A denial returns exit 126 and the feedback on stderr."""
        if self.env is None:
            raise RuntimeError("Guard.execute needs an environment")
        # The decision and the before-run snapshots share one fsync, durable before the command runs.
        with self.journal.batch():
            # An Environment runs a command with no stdin (the twin's shell, a subprocess on /dev/null): a tool
            # that reads its body there reads nothing unless the text gives one (a heredoc, a pipe).
            adm = self.before(command, stdin="")
            if adm.runs:
                self.prepare(adm)
        if not adm.runs:
            msg = "\n".join(f.render() for f in adm.feedback)
            result = CommandResult(command=command, stdout="", stderr=msg + "\n", exit_code=DENIED_EXIT_CODE)
            self.journal.append("result", ref=adm.seq, exit_code=result.exit_code, duration_s=0.0, denied=True)
            return result
        result = (self._agent_env or self.env).run(command)
        extra = self.after(adm, result)
        notes = [f.render() for f in adm.feedback + extra]
        if notes:
            result = CommandResult(command=result.command, stdout=result.stdout,
                                   stderr=(result.stderr + ("\n" if result.stderr and not result.stderr.endswith("\n")
                                                            else "") + "\n".join(notes) + "\n"),
                                   exit_code=result.exit_code, duration_s=result.duration_s)
        return result

    # -- the declaration ---------------------------------------------------------------------------------------

    def on_declare(self, progress: Callable[[Progress], None] | None = None) -> DeclareOutcome:
        """Run the declaration checks in order; the first failure rejects with its feedback code. `progress`
        hears each check start and what a waiting check reports (verifiers.progress) while the guard holds the
        declaration."""
        self._counts["declarations"] += 1
        t0 = self.env.clock.now() if self.env is not None else 0.0
        self.journal.append("declare")
        checks = self._declaration_checks
        if checks is None:
            checks = _default_declaration_checks(self.context)
        verdicts: list[Verdict] = []
        feedback: list[Feedback] = []
        unverified: list[Feedback] = []
        clock = self.env.clock if self.env is not None else None

        def listen(p: Progress) -> None:
            self.pending = {"since": round(t0, 3), "held_s": round(clock.now() - t0, 3) if clock else 0.0,
                            **p.to_dict()}
            if progress is not None:
                progress(p)

        self.pending = {"since": round(t0, 3), "held_s": 0.0, "stage": "declare", "message": "starting"}
        try:
            with reporting_to(listen):
                for chk in checks:
                    if self.env is None:
                        break
                    name = getattr(chk, "name", type(chk).__name__)
                    report(name, f"checking {name}")
                    v = _safe_check(chk, self.env, self.journal, self._criteria)
                    verdicts.append(v)
                    self.journal.append("verdict", **v.to_dict())
                    if _rejects(v):
                        feedback.append(_feedback_from_verdict(v))
                        break
                    if v.status is VerdictStatus.INCONCLUSIVE:
                        unverified.append(_feedback_from_verdict(v))
        finally:
            self.pending = None
        accepted = not feedback
        if not accepted:
            self._counts["declarations_rejected"] += 1
        for f in feedback:
            self.journal.append("feedback", **f.to_dict())
        self._note_codes(feedback)
        t1 = self.env.clock.now() if self.env is not None else 0.0
        self.journal.append("declaration_outcome", accepted=accepted, held_s=round(t1 - t0, 6),
                            **({"unverified": [f.code for f in unverified]} if unverified else {}))
        self.declarations.append({"t": round(t0, 6), "held_s": round(t1 - t0, 6), "accepted": accepted,
                                  "codes": [f.code for f in feedback],
                                  "held_failing_cycles": _failing_cycles_after(verdicts, t0),
                                  **({"unverified": [f.code for f in unverified]} if unverified else {})})
        return DeclareOutcome(accepted=accepted, feedback=feedback, verdicts=verdicts, unverified=unverified,
                              held_s=t1 - t0)

    # -- reporting ---------------------------------------------------------------------------------------------

    def _note_codes(self, fb: Sequence[Feedback]) -> None:
        for f in fb:
            self._codes.append(f.code)
            self._code_counts[f.code] += 1

    def stats(self) -> dict[str, Any]:
        """Counts, the feedback codes in order (the last FEEDBACK_KEPT; `feedback_counts` has every one) and the
        declarations."""
        return {**self._counts, "feedback": list(self._codes), "feedback_counts": dict(self._code_counts),
                "declaration_log": list(self.declarations), "declaration_pending": self._pending_now()}

    def _pending_now(self) -> dict[str, Any] | None:
        """The declaration being verified, if any, with how long it has been held as of now."""
        pending = self.pending
        if pending is None:
            return None
        held = round(self.env.clock.now() - float(pending.get("since", 0.0)), 3) if self.env is not None else 0.0
        return {**pending, "held_s": held}


def _failing_cycles_after(verdicts: Sequence[Verdict], t0: float) -> int:
    """Load cycles (and the settling segments before the first full one) that ended out of band after the
    declaration, in the verdicts' evidence: how long the guard held a declaration that came before the SLIs had
    recovered."""
    n = 0
    for v in verdicts:
        ev = v.evidence if isinstance(v.evidence, Mapping) else {}
        for c in [*ev.get("settling", ()), *ev.get("cycles", ())]:
            if isinstance(c, Mapping) and c.get("state") == "fail" and float(c.get("t_end", 0.0)) > t0:
                n += 1
    return n


def _deny_message(denies: Sequence[Finding]) -> str:
    return " ".join(f"{f.id}: {f.msg}" for f in denies) or "denied by policy"


def _safe_check(chk: DeclarationCheck, env: Environment, journal: Any, criteria: Any) -> Verdict:
    """A verifier that raises is an ERROR verdict, never an exception that kills the agent's session."""
    try:
        return chk.check(env, journal, criteria)
    except Exception as e:  # noqa: BLE001 - a broken verifier must not end the session
        return Verdict(status=VerdictStatus.ERROR, verifier=type(chk).__name__,
                       message=f"verifier error: {type(e).__name__}: {e}")


def _default_declaration_checks(context: IncidentContext) -> Sequence[DeclarationCheck]:
    try:
        from verifiers.suite import declare_verifiers
    except ImportError:
        return ()
    return declare_verifiers(context.model_dump(mode="json"))


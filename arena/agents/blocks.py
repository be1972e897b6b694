"""The persona agents' building blocks: what a stochastic agent can assemble one episode from, per scenario.

Sits under arena.agents; called by the persona agents (arena/agents/persona.py) when an episode starts and by
the calibration script. (Whether an episode ran the full reference fix is `EpisodeResult.full_fix`.)
The blocks are the scenario's solution scripts, each labelled in its `agent_blocks` by what it models (the labels
match the kind of failure the script was written to show):

  reference                      the durable fix: its steps up to its last change, then its tail (waits, checks)
  other passing scripts          alternatives: valid fixes in another form
  not_durable                    ephemeral forms of the fix
  scope_violation                overbroad forms: the fix plus (or instead of) out-of-scope changes
  residual_cause, restart*       symptom fixes (restarts that mask the cause)
  fix_missing                    partial fixes
  premature_declaration          premature forms: mark the incidents where declaring before settling can fail
  read-only commands of all      diagnostics (and the loops of a stuck agent)

A scenario's `agent_blocks` section lists which scripts are which (the scenario author's labels; the grader's
matrix judges the same scripts separately and is never read here). Whether a command changes anything is decided
by the guard's own normaliser (an operator-visible fact), never by an expected-command list.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence, Union

from arena.scenario import AgentBlocksSpec, Scenario, SolutionScript

__all__ = ["Run", "Pause", "Move", "FixForm", "AgentBlocks", "derive_blocks", "missing_changes", "change_keys",
           "same_command", "changes_anything"]


@dataclass(frozen=True)
class Run:
    """One shell command of a plan."""

    text: str
    stdin: str | None = None

    @property
    def key(self) -> str:
        return same_command(self.text) + ("\n" + self.stdin.strip() if self.stdin else "")


@dataclass(frozen=True)
class Pause:
    """Let virtual time pass (a script's `sleep:`)."""

    seconds: float


Move = Union[Run, Pause]


@dataclass(frozen=True)
class FixForm:
    """One way to carry out a repair: a script's steps up to and including its last change."""

    name: str
    steps: tuple[Move, ...]

    @property
    def changes(self) -> tuple[Run, ...]:
        return tuple(m for m in self.steps if isinstance(m, Run) and changes_anything(m.text))


@dataclass(frozen=True)
class AgentBlocks:
    """Everything a persona can assemble an episode from."""

    diagnostics: tuple[Run, ...]
    reference: FixForm
    tail: tuple[Move, ...]  # the reference after its last change: the settle waits and checks before declaring
    alternatives: tuple[FixForm, ...] = ()
    ephemeral: tuple[FixForm, ...] = ()
    overbroad: tuple[FixForm, ...] = ()
    symptom: tuple[FixForm, ...] = ()
    partial: tuple[FixForm, ...] = ()
    premature: tuple[FixForm, ...] = ()  # the fix declared before it settled: where impatience can fail

    @property
    def with_extras(self) -> tuple[FixForm, ...]:
        """The reference fix followed by the out-of-scope changes of one overbroad form (one per form)."""
        have = {r.key for r in self.reference.changes}
        out = []
        for f in self.overbroad:
            extra = tuple(r for r in f.changes if r.key not in have)
            if extra:
                out.append(FixForm(f"reference+{f.name}", self.reference.steps + extra))
        return tuple(out)

    @property
    def settle_s(self) -> float:
        """How long the reference waits after its last change (what a patient agent waits)."""
        return sum(m.seconds for m in self.tail if isinstance(m, Pause))


def same_command(text: str) -> str:
    """Whitespace-insensitive form of a command, for telling whether two runs are the same action."""
    return " ".join(text.split())


@lru_cache(maxsize=4096)
def changes_anything(text: str) -> bool:
    """True when the guard's normaliser says the command mutates something (unknown counts as mutating)."""
    from guardrail.actions import normalise

    if text.strip() == "declare_repair_complete":
        return False
    return any(a.is_mutating for a in normalise(text))


def _moves(script: SolutionScript) -> list[Move]:
    out: list[Move] = []
    for st in script.script:
        if st.declare or (st.run is not None and st.run.strip() == "declare_repair_complete"):
            break  # what follows a declaration is a reaction to a verdict, not part of the form
        if st.sleep is not None:
            out.append(Pause(float(st.sleep)))
        elif st.run is not None:
            out.append(Run(st.run, st.stdin))
    return out


def _split(name: str, script: SolutionScript) -> tuple[FixForm, tuple[Move, ...]]:
    moves = _moves(script)
    last = max((i for i, m in enumerate(moves) if isinstance(m, Run) and changes_anything(m.text)), default=-1)
    return FixForm(name, tuple(moves[: last + 1])), tuple(moves[last + 1:])


def derive_blocks(scenario: Scenario) -> AgentBlocks:
    """The scenario's blocks: the solution scripts its `agent_blocks` labels by kind, split into moves."""
    spec = scenario.agent_blocks or AgentBlocksSpec()
    if spec.reference not in scenario.solutions:
        raise ValueError(f"{scenario.id}: no reference solution {spec.reference!r} to build agents from")
    reference, tail = _split(spec.reference, scenario.solutions[spec.reference])
    # The scenario's own labels of its scripts (agent_blocks), never the grader's verdicts on them.
    kinds = {k: list(getattr(spec, k)) for k in ("alternatives", "ephemeral", "overbroad", "symptom", "partial",
                                                   "premature")}
    forms: dict[str, tuple[FixForm, ...]] = {}
    for k, names in kinds.items():
        fs = [_split(n, scenario.solutions[n])[0] for n in names]
        # A form with no change at all (a no-op) is not a repair of any kind.
        forms[k] = tuple(f for f in fs if f.changes)
    diag: dict[str, Run] = {}
    order = [spec.reference] + sorted(n for n in scenario.solutions if n != spec.reference)
    for n in order:
        for m in _moves(scenario.solutions[n]):
            if isinstance(m, Run) and not m.stdin and not changes_anything(m.text):
                diag.setdefault(m.key, m)
    for text in spec.diagnostics:
        diag.setdefault(same_command(text), Run(text))
    return AgentBlocks(diagnostics=tuple(diag.values()), reference=reference, tail=tail, **forms)


@lru_cache(maxsize=1024)
def change_keys(run: Run) -> frozenset[str]:
    """The setting keys a plan's command changes, as the guard's normaliser names them (redis.maxmemory,
    mariadb.max_user_connections, app.roles.channel.db.pool_size): what a feedback message can name."""
    from guardrail.actions import normalise

    text = run.text if not run.stdin else f"{run.text} <<'EOF'\n{run.stdin}\nEOF"
    return frozenset(str(k.key) for a in normalise(text) if a.is_mutating for k in a.keys)


def missing_changes(blocks: AgentBlocks, done: Sequence[str]) -> list[Run]:
    """The reference's changes not yet run (by command key), in the reference's order."""
    have = set(done)
    return [r for r in blocks.reference.changes if r.key not in have]

"""EmbeddedOPA: the real OPA Go engine in process (opa-golib-python-bindings), loaded with a policies/ tree.

The default PolicyEngine behind the Guard and `guardrail check`; `guardrail policy test|eval` use it too. It
evaluates one fixed query, `decision := data.guardrail.decision`, so OPA's prepared-query cache serves every
decision after the first. Load and compile errors raise PolicyLoadError with the file and line; evaluation
failures never raise from decide(): they become a fail-closed Decision (see guardrail.policy.decisions).

The input's context is the same for every decision of a session and is most of the input's bytes, and turning
input JSON into OPA values costs about as much per byte as the rules themselves. So decide() loads each distinct
context once, as data (`data.incident_contexts[<digest>]`), and sends `{"action", "command", "context_ref"}`;
policies/lib/sre.rego reads the context from there, or from `input.context` when no ref is given (OPAServer,
`guardrail policy eval`, Rego tests). Past MAX_LOADED_CONTEXTS distinct contexts the input goes inline as before.

What lib derives from the context alone (protected keys exact and as globs, ceiling globs, constraints by kind) is
evaluated once when the context is loaded (DERIVED_QUERY) and stored beside it as `data.incident_derived[<digest>]`;
lib reads that copy on this path and derives the same values per decision on every other
(tests/guardrail/policy/test_policy_equivalence.py checks the copy against the per-decision values).

Loading a context changes the data document, and OPA then prepares its queries again (~50 ms on this tree). The
context and what lib derives from it go in together, one change per context, and warm() does it ahead of any
command: when GuardSessions is built (`guardrail shell` and `mcp` start) and when a Guard is built, so that no
command pays for it and no session queued behind the engine waits for it.

Two more savings on the hot path, both measured by bench/policy_latency.py:
- The action goes to OPA without the fields no rule reads (UNREAD_ACTION_FIELDS): converting input JSON into OPA
  values costs about 0.15 ms per KB. tests/guardrail/policy/test_policy_wire.py fails if a rule starts reading one.
- A bounded memo of decision documents, keyed on the exact input text sent to OPA. That text names everything a
  decision reads: the action, the command, and the context by its content digest; the rest of the data document
  (the policy tree's data and `data=`) is fixed when the engine is built. An agent re-runs the same diagnostics
  (`kubectl get pods`, `redis-cli INFO`) many times a session; a hit skips the evaluation and yields the same
  findings under a fresh decision id. `cache_stats()` reports hits and misses; `decision_cache=0` turns it off.
- decide_all() decides the actions of one command in one evaluation (BATCH_QUERY, `with input.action as a`):
  the Guard uses it for commands with several actions; tests/guardrail/policy/test_policy_wire.py checks that it
  gives what decide() gives for every multi-action command of the corpus.
"""

from __future__ import annotations

import collections
import hashlib
import json
import queue
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from opa_bindings import OpaEngine, OpaError

from guardrail.errors import PolicyLoadError
from guardrail.policy.base import Decision
from guardrail.policy.decisions import (DecisionIds, MalformedDecision, decide_without_broken, fail_closed,
                                        from_document, rule_packages)
from guardrail.policy.loader import DECISION_PACKAGE, PolicyTree, load_error, shipped_policy_dir

__all__ = ["EmbeddedOPA", "DECISION_QUERY", "BATCH_QUERY", "CONTEXTS_DATA_KEY", "DERIVED_DATA_KEY", "compile_tree"]

DECISION_QUERY = "decision := data.guardrail.decision"
# The decisions of several actions of one command in one evaluation: the same document, once per action.
BATCH_QUERY = "decisions := [d | some a in input.actions; d := data.guardrail.decision with input.action as a]"
# Actions decided per evaluation of BATCH_QUERY: a chunk costs OPA its size squared (see decide_all).
BATCH_CHUNK = 32
# Where loaded incident contexts live in the data document (read by policies/lib/sre.rego).
CONTEXTS_DATA_KEY = "incident_contexts"
# What lib derives from a context alone (protected keys, constraints by kind, ...), evaluated once when the context
# is loaded and stored beside it; lib reads the stored copy when there is one (see policies/lib/sre.rego).
DERIVED_DATA_KEY = "incident_derived"
DERIVED_QUERY = "derived := data.guardrail.lib.context_derived"
# Each loaded context stays in the engine for its life; a long-lived server meeting endless distinct contexts
# stops loading them here and sends them inline (correct, only slower).
MAX_LOADED_CONTEXTS = 256
# Action fields the normaliser writes that no rule reads (checked by tests/guardrail/policy/test_policy_wire.py):
# `via` (the wrappers a command came through), and the kubectl details' resource list (rules read kind/name, and
# resource_kinds for a list of kinds such as `configmaps,secrets`).
UNREAD_ACTION_FIELDS = frozenset({"via"})
UNREAD_DETAIL_FIELDS = frozenset({"resources"})
# How long a decision may take before it fails closed. A decision takes about a millisecond; only a rule that
# loops over a huge range or document comes near this, and OPA cannot be interrupted, so the evaluation runs on the
# engine's own thread and the caller stops waiting (and Ctrl-C works) at the deadline.
DEFAULT_DEADLINE_S = 10.0
# Engines left to finish an evaluation past its deadline while a fresh one takes the later decisions. Each burns a
# core until its rule ends; past this many, later decisions queue behind them (and fail closed at their deadline).
MAX_ABANDONED = 1
# Decision documents kept by the memo: about 1 KB each with its key (the input text), so at most ~1 MB.
DEFAULT_DECISION_CACHE = 1024
# A query that touches nothing: evaluating it forces OPA to compile every module added so far.
_COMPILE_PROBE = "x := true"


def compile_tree(tree: PolicyTree, *, tests: bool = False, data: Mapping[str, Any] | None = None) -> OpaEngine:
    """A fresh engine holding the tree's modules (and its tests when asked), compiled, or PolicyLoadError."""
    engine = OpaEngine()
    modules = tree.modules if tests else tree.decision_modules
    try:
        for m in modules:
            engine.add_policy(str(m.path), m.source)
        if tree.data:
            engine.add_data(tree.data)
        if data:
            engine.add_data(dict(data))
        engine.eval_query(_COMPILE_PROBE)
    except OpaError as e:
        engine.close()
        raise load_error(e.message, tree) from e
    return engine


# Every package's deny/warn that is not a set (`deny := 5`), evaluated once at load on a no-op action: the aggregator
# iterates them, and a number or a string iterates to nothing, so such a rule would never deny.
_SHAPE_QUERY = ('bad := [[pkg, k] | some pkg; some k in ["deny", "warn"]; x := data.guardrail.rules[pkg][k]; '
                'not is_set(x)]')


def _is_shipped(tree: PolicyTree) -> bool:
    """The shipped library as it is: no layer of the user's own, no other root."""
    return not any(m.upload_id for m in tree.modules) and tree.root.resolve() == shipped_policy_dir().resolve()


def check_shape(engine: OpaEngine, tree: PolicyTree) -> None:
    """PolicyLoadError for a whole library (`package guardrail`) with no `decision` rule at all, or a rules package
    whose deny/warn is defined and not a set of findings (evaluated on a no-op action with an empty context; a rule
    that errors there, or is defined only for other inputs, is left to the decisions, which fail closed)."""
    roots = [m for m in tree.decision_modules if m.package == DECISION_PACKAGE]
    if roots and not any(re.search(r"(?m)^decision\b", m.source) for m in roots):
        raise PolicyLoadError("package guardrail defines no `decision`: a whole library must define it ({deny, "
                              "warn, exempted}), as policies/guardrail.rego does; a tree of your own rules must "
                              "not use `package guardrail`", path=str(roots[0].path), line=1)
    probe = {"action": dict(_WARM_ACTION), "context": {}, "command": "true"}
    try:
        bad = engine.eval_query(_SHAPE_QUERY, input=probe)[0]["bad"]
    except (OpaError, LookupError, TypeError):
        return
    for pkg, rule in bad:
        module = next((m for m in tree.decision_modules if m.package == f"guardrail.rules.{pkg}"), None)
        line = next((n for n, ln in enumerate(module.source.splitlines(), 1)
                     if re.match(rf"\s*{rule}\b", ln)), None) if module else None
        raise PolicyLoadError(f"{rule} in package guardrail.rules.{pkg} is not a set of findings: write "
                              f"`{rule} contains {{\"id\": ..., \"msg\": ..., \"details\": {{}}}} if {{ ... }}`",
                              path=str(module.path if module else tree.root), line=line)


class EmbeddedOPA:
    """The OPA engine in process; decides one input in about a tenth of a millisecond."""

    name = "embedded-opa"

    def __init__(
        self,
        policy_dir: str | Path | None = None,
        *,
        data: Mapping[str, Any] | None = None,
        allow_readonly_on_error: bool = False,
        timeout_s: float | None = DEFAULT_DEADLINE_S,
        clock: Callable[[], float] = time.perf_counter,
        decision_cache: int = DEFAULT_DECISION_CACHE,
    ):
        """`data` is merged into the data document (e.g. {"exceptions": ["SRE-TRAFFIC-001"]}). Each evaluation
        runs on the engine's own thread and a late answer fails closed after `timeout_s` (DEFAULT_DEADLINE_S);
        `timeout_s=None` evaluates in the caller's thread, with no deadline (and no Ctrl-C until OPA returns).
        `decision_cache` bounds the memo of decision documents (0 turns it off). An action the engine cannot
        decide is denied, read-only or not; `allow_readonly_on_error` opts in to letting plain reads run then."""
        self.tree = PolicyTree.load(policy_dir)
        self.allow_readonly_on_error = allow_readonly_on_error
        self.timeout_s = timeout_s
        self._clock = clock
        self._ids = DecisionIds("opa")
        self._data = data
        engine = compile_tree(self.tree, data=data)
        try:
            if not _is_shipped(self.tree):  # the shipped library's shape is checked by its tests; skip the ~0.1 s
                check_shape(engine, self.tree)
        except PolicyLoadError:
            engine.close()
            raise
        self._slot = _Slot(engine, timeout_s)
        # Contexts go to OPA by reference when the tree's lib reads them so (the shipped lib does); a whole library
        # of one's own that reads input.context gets them inline.
        self._by_ref = any("input.context_ref" in m.source for m in self.tree.decision_modules)
        # The rules packages the shipped decision module gathers, for deciding without a broken one (_salvage).
        self._rule_packages = rule_packages(self.tree.decision_modules, shipped_policy_dir() / "guardrail.rego")
        # Engines left to finish an evaluation that ran past its deadline (see _retire).
        self._abandoned: list[_Slot] = []
        self._swap_lock = threading.Lock()
        self._context_lock = threading.Lock()
        # Context objects seen lately, by id: (the object, a copy of it, its ref).
        self._seen_contexts: dict[int, tuple[Any, Any, str]] = {}
        self._cache_size = max(0, int(decision_cache))
        self._cache: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._cache_lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    # -- the seam ----------------------------------------------------------------------------------------------

    def decide(self, input: Mapping[str, Any]) -> Decision:
        start = self._clock()
        decision_id = self._ids()
        slot = self._slot
        try:
            wire = self._wire_input(input, slot)
            key = self._cache_key(wire) if self._cache_size else None
            doc = self._cached(key) if key is not None else None
            if doc is None:
                rows = self._eval(slot, DECISION_QUERY, wire)
                if not rows or "decision" not in rows[0]:
                    raise MalformedDecision("data.guardrail.decision is undefined")
                doc = rows[0]["decision"]
                decision = from_document(doc, decision_id=decision_id, engine=self.name,
                                         duration_ms=(self._clock() - start) * 1000.0)
                if key is not None:
                    self._store(key, doc)  # only a well-formed answer is remembered
                return decision
            return from_document(doc, decision_id=decision_id, engine=self.name,
                                 duration_ms=(self._clock() - start) * 1000.0)
        except Exception as e:  # noqa: BLE001  (any engine failure must fail closed, never reach the agent loop)
            salvaged = self._salvage(slot, input, e, decision_id, start) if _in_the_rules(e) else None
            if salvaged is not None:
                return salvaged
            return fail_closed(input, _describe(e), decision_id=decision_id, engine=self.name,
                               duration_ms=(self._clock() - start) * 1000.0,
                               allow_readonly_on_error=self.allow_readonly_on_error,
                               timed_out=isinstance(e, EvaluationTimeout))

    def decide_all(self, inputs: Sequence[Mapping[str, Any]]) -> list[Decision]:
        """The decisions for the actions of one command, in order: what decide() gives for each, with the memo's
        misses evaluated together in one query (one call into OPA, and the context looked up once, instead of one
        per action). Inputs that do not share one command and context are decided one by one."""
        inputs = list(inputs)
        if len(inputs) < 2 or not _one_command(inputs):
            return [self.decide(i) for i in inputs]
        start = self._clock()
        ids = [self._ids() for _ in inputs]
        slot = self._slot
        try:
            wires = [self._wire_input(i, slot) for i in inputs]
            keys = [self._cache_key(w) if self._cache_size else None for w in wires]
            docs = [self._cached(k) if k is not None else None for k in keys]
            missing = [n for n, d in enumerate(docs) if d is None]
            if len(missing) == 1:
                rows = self._eval(slot, DECISION_QUERY, wires[missing[0]])
                found = [rows[0]["decision"]] if rows and "decision" in rows[0] else None
            elif missing:
                # In chunks: `with input.action as a` costs OPA a pass over the input, actions list included, so
                # one evaluation of N actions costs N squared (1,000 statements of one psql took 16 s).
                found = []
                for at in range(0, len(missing), BATCH_CHUNK):
                    batch = {k: v for k, v in wires[0].items() if k != "action"}
                    batch["actions"] = [wires[n]["action"] for n in missing[at:at + BATCH_CHUNK]]
                    rows = self._eval(slot, BATCH_QUERY, batch)
                    part = rows[0].get("decisions") if rows else None
                    if not isinstance(part, list):
                        raise MalformedDecision("data.guardrail.decision is undefined for an action")
                    found += part
            else:
                found = []
            if not isinstance(found, list) or len(found) != len(missing):
                raise MalformedDecision("data.guardrail.decision is undefined for an action")
            for n, doc in zip(missing, found):
                docs[n] = doc
            elapsed = (self._clock() - start) * 1000.0
            out = [from_document(doc, decision_id=i, engine=self.name, duration_ms=elapsed)
                   for doc, i in zip(docs, ids)]
            for n in missing:
                if keys[n] is not None:
                    self._store(keys[n], docs[n])
            return out
        except Exception as e:  # noqa: BLE001  (as decide(): every action fails closed, none raises)
            if _in_the_rules(e) and self._rule_packages:
                return [self.decide(i) for i in inputs]  # each is decided without the broken rules (_salvage)
            elapsed = (self._clock() - start) * 1000.0
            return [fail_closed(i, _describe(e), decision_id=d, engine=self.name, duration_ms=elapsed,
                                allow_readonly_on_error=self.allow_readonly_on_error,
                                timed_out=isinstance(e, EvaluationTimeout)) for i, d in zip(inputs, ids)]

    def _salvage(self, slot: "_Slot", input: Mapping[str, Any], error: BaseException, decision_id: str,
                 start: float) -> Decision | None:
        """The decision without the rules packages in error (decisions.decide_without_broken), or None."""
        if not self._rule_packages:
            return None
        try:
            wire = self._wire_input(input, slot)
        except Exception:  # noqa: BLE001
            return None

        def evaluate(pkg: str) -> tuple[Any, Any]:
            rows = self._eval(slot, f"d := [f | some f in data.guardrail.rules.{pkg}.deny]; "
                                    f"w := [f | some f in data.guardrail.rules.{pkg}.warn]", wire)
            return rows[0]["d"], rows[0]["w"]

        def exempt(found: list[dict[str, Any]]) -> list[int]:
            rows = self._eval(slot, "x := [n | some n, f in input.findings; data.guardrail.exempt(f)]",
                              {**wire, "findings": found})
            return rows[0]["x"]

        return decide_without_broken(input, _describe(error), self._rule_packages, evaluate, exempt,
                                     decision_id=decision_id, engine=self.name,
                                     duration_ms=lambda: (self._clock() - start) * 1000.0,
                                     allow_readonly_on_error=self.allow_readonly_on_error)

    def warm(self, context: Mapping[str, Any]) -> None:
        """Load `context` and prepare the decision queries for it now, before a session's first command.

        Loading a context changes the engine's data, and OPA then prepares each query afresh (~50 ms each on
        this policy tree); left to the first decision, that lands on one command and on every session queued
        behind the engine. Only DECISION_QUERY is prepared: BATCH_QUERY, for commands of several actions, is
        prepared by the first such command (prepared ahead, it raised the server's RSS under
        bench/guard_load.py from ~175 to ~275 MB). Never raises: a context that cannot be loaded is sent
        inline, as decide() would."""
        slot = self._slot
        try:
            self._eval(slot, DECISION_QUERY, self._wire_input({"action": dict(_WARM_ACTION), "context": context,
                                                               "command": "true"}, slot))
        except Exception:  # noqa: BLE001  (a warm-up that fails costs only the time it was meant to save)
            pass

    # -- for the CLI and tests -----------------------------------------------------------------------------------

    def query(self, query: str, input: Any = None) -> list[dict[str, Any]]:
        """Evaluate any Rego query; returns OPA's binding rows. Raises OpaError on a bad query."""
        return self._slot.engine.eval_query(query, input=input)

    def cache_stats(self) -> dict[str, int]:
        """The decision memo's hits, misses and size since the engine was built."""
        with self._cache_lock:
            return {"hits": self._hits, "misses": self._misses, "size": len(self._cache),
                    "capacity": self._cache_size}

    def close(self) -> None:
        slot = self._slot
        if slot.worker is not None and not slot.worker.stop():
            # An evaluation that outlived its deadline is still running in OPA (it cannot be interrupted), and
            # closing the engine under it is not safe: leave both to the process's exit.
            return
        slot.engine.close()

    def __enter__(self) -> "EmbeddedOPA":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _wire_input(self, input: Any, slot: "_Slot | None" = None) -> Any:
        """The input as sent to `slot`'s engine (the current one by default): its context replaced by a reference
        to the same context loaded there as data, and the action without the fields no rule reads."""
        slot = slot or self._slot
        if not isinstance(input, Mapping):
            return input
        wire = dict(input)
        action = wire.get("action")
        if isinstance(action, Mapping):
            wire["action"] = _trim_action(action)
        if self._by_ref and isinstance(wire.get("context"), Mapping):
            ref = self._context_ref(wire["context"], slot)
            if ref is not None:
                del wire["context"]
                wire["context_ref"] = ref
        return wire

    def _cache_key(self, wire: Any) -> str | None:
        # The exact text of what OPA is asked: a context passed by reference is named by its content digest (and
        # loaded once, never changed); an inline one is in the text itself. Either way the key holds all of the
        # input, and the rest of the data document is fixed for the engine's life.
        try:
            return json.dumps(wire, separators=(",", ":"), ensure_ascii=False)
        except (TypeError, ValueError):
            return None

    def _cached(self, key: str) -> Any:
        with self._cache_lock:
            doc = self._cache.get(key)
            if doc is None:
                self._misses += 1
                return None
            self._cache.move_to_end(key)
            self._hits += 1
            return doc

    def _store(self, key: str, doc: Any) -> None:
        with self._cache_lock:
            self._cache[key] = doc
            self._cache.move_to_end(key)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def _context_ref(self, context: Mapping[str, Any], slot: "_Slot") -> str | None:
        # A session passes the same context object every time. Its identity alone is not enough (a caller may
        # change the dict in place), but comparing it with a copy is a C-level walk, far cheaper than hashing.
        seen = self._seen_contexts.get(id(context))
        if seen is not None and seen[0] is context and seen[2] in slot.loaded and seen[1] == context:
            return seen[2]
        try:
            text = json.dumps(context, separators=(",", ":"), ensure_ascii=False)
        except (TypeError, ValueError):
            return None
        ref = hashlib.blake2b(text.encode(), digest_size=12).hexdigest()
        if ref in slot.loaded:
            self._remember(context, text, ref)
            return ref
        with self._context_lock:
            if ref in slot.loaded:
                return ref
            if len(slot.loaded) >= MAX_LOADED_CONTEXTS:
                return None
            loaded = json.loads(text)
            # The derived values first, from the context inline, so that the data changes once: every change
            # makes OPA prepare its queries again.
            doc = {CONTEXTS_DATA_KEY: {ref: loaded}}
            derived = self._derived(loaded, slot)
            if derived is not None:
                doc[DERIVED_DATA_KEY] = {ref: derived}
            try:
                slot.engine.add_data(doc)
            except OpaError:
                return None
            slot.loaded.add(ref)
        self._remember(context, text, ref)
        return ref

    def _derived(self, context: Any, slot: "_Slot") -> dict[str, Any] | None:
        # What lib derives from the context, evaluated with the context inline (lib reads input.context when no
        # ref is given). A policy tree without lib.context_derived (or an error) gives None: lib then derives per
        # decision.
        try:
            rows = slot.engine.eval_query(DERIVED_QUERY, input={"context": context})
        except OpaError:
            return None
        derived = rows[0].get("derived") if rows else None
        return derived if isinstance(derived, dict) else None

    def _remember(self, context: Mapping[str, Any], text: str, ref: str) -> None:
        if len(self._seen_contexts) >= 64:  # sessions come and go; the live ones are re-remembered at once
            self._seen_contexts.clear()
        self._seen_contexts[id(context)] = (context, json.loads(text), ref)

    def _eval(self, slot: "_Slot", query: str, input: Any) -> list[dict[str, Any]]:
        if slot.worker is None:
            return slot.engine.eval_query(query, input=input)
        try:
            return slot.worker.call(self.timeout_s, query, input)
        except EvaluationTimeout:
            self._retire(slot)
            raise

    def _retire(self, slot: "_Slot") -> None:
        """An evaluation on `slot` ran past its deadline and OPA cannot stop it: every later decision would queue
        behind it and fail closed too (a runaway rule ran for 354 s). Later decisions go to a fresh engine, built
        from the same tree and data (~0.2-0.3 s), and the old one is closed when its evaluation ends. At most
        MAX_ABANDONED engines are left running, each burning a core: past that, decisions queue as before."""
        with self._swap_lock:
            if self._slot is not slot:
                return  # another caller has replaced it already
            self._abandoned = [s for s in self._abandoned if s.worker is not None and s.worker.busy()]
            if len(self._abandoned) >= MAX_ABANDONED:
                return
            try:
                fresh = _Slot(compile_tree(self.tree, data=self._data), self.timeout_s)
            except Exception:  # noqa: BLE001  (the old engine stays: decisions still fail closed, never raise)
                return
            self._abandoned.append(slot)
            self._slot = fresh
        if slot.worker is not None:
            slot.worker.stop(wait_s=0, then=slot.engine.close)

    def abandoned(self) -> int:
        """How many engines are still finishing an evaluation that outlived its deadline."""
        with self._swap_lock:
            return sum(1 for s in self._abandoned if s.worker is not None and s.worker.busy())


class _Slot:
    """One compiled engine, the thread that evaluates on it, and the contexts loaded into it as data."""

    def __init__(self, engine: OpaEngine, timeout_s: float | None):
        self.engine = engine
        self.worker = _Evaluator(engine.eval_query) if timeout_s is not None else None
        self.loaded: set[str] = set()


# The action warm() decides: `true`, a read-only no-op, in the shape the normaliser gives it.
_WARM_ACTION = {"tool": "true", "verb": "true", "target": {"kind": "", "name": "", "namespace": None}, "keys": [],
                "layer": "none", "mutating": False, "raw": "true", "words": ["true"], "opaque_reason": None,
                "details": {}}


def _one_command(inputs: Sequence[Mapping[str, Any]]) -> bool:
    """Do these inputs differ only in their action (so one query with `with input.action` decides them all)?"""
    first = inputs[0]
    if not isinstance(first, Mapping) or set(first) != {"action", "context", "command"}:
        return False
    return all(isinstance(i, Mapping) and set(i) == set(first) and i["command"] == first["command"]
               and (i["context"] is first["context"] or i["context"] == first["context"]) for i in inputs[1:])


def _trim_action(action: Mapping[str, Any]) -> Mapping[str, Any]:
    """The action without the fields no rule reads (a copy; the caller's dict is left alone)."""
    trimmed = {k: v for k, v in action.items() if k not in UNREAD_ACTION_FIELDS}
    details = trimmed.get("details")
    if isinstance(details, Mapping) and not UNREAD_DETAIL_FIELDS.isdisjoint(details):
        trimmed["details"] = {k: v for k, v in details.items() if k not in UNREAD_DETAIL_FIELDS}
    return trimmed


class _Evaluator:
    """One daemon thread that runs the engine's evaluations, so that a caller can stop waiting (a deadline, Ctrl-C)
    while OPA, which cannot be interrupted, finishes in the background. A daemon thread: an evaluation still running
    never holds up the process's exit (a pool's worker would be joined at exit, and Ctrl-C would wait it out)."""

    def __init__(self, fn: Callable[..., Any]):
        self._fn = fn
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pending = 0
        self._idle = threading.Event()
        self._idle.set()
        self._then: Callable[[], Any] | None = None
        threading.Thread(target=self._loop, name="opa-eval", daemon=True).start()

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            args, box, done = job
            if done.is_set():
                pass  # its caller stopped waiting (the deadline passed while it queued): nobody reads the answer
            else:
                try:
                    box.append((True, self._fn(*args)))
                except BaseException as e:  # noqa: BLE001  (handed to the caller, who decides)
                    box.append((False, e))
            with self._lock:
                self._pending -= 1
                if self._pending == 0:
                    self._idle.set()
            done.set()
        if self._then is not None:
            self._then()

    def call(self, timeout_s: float | None, *args: Any) -> Any:
        box: list[tuple[bool, Any]] = []
        done = threading.Event()
        with self._lock:
            self._pending += 1
            self._idle.clear()
        self._jobs.put((args, box, done))
        if not done.wait(timeout_s):
            done.set()  # the thread skips it if it has not started it yet
            raise EvaluationTimeout(timeout_s)
        ok, value = box[0]
        if ok:
            return value
        raise value

    def stop(self, wait_s: float = 1.0, then: Callable[[], Any] | None = None) -> bool:
        """End the thread once its queue is done, and call `then` on it when it ends; False if an evaluation is
        still running after `wait_s`."""
        self._then = then
        self._jobs.put(None)
        return self._idle.wait(wait_s)

    def busy(self) -> bool:
        return not self._idle.is_set()


class EvaluationTimeout(Exception):
    def __init__(self, timeout_s: float | None):
        super().__init__(f"policy evaluation took longer than {timeout_s:g} s (a rule that loops over a large "
                         "range or a large document?)")


def _in_the_rules(e: BaseException) -> bool:
    """An error of the policy's own rules (they recur on every input like this one), not a deadline or a failure
    to reach the engine."""
    return isinstance(e, MalformedDecision) or (isinstance(e, OpaError) and str(e.code).startswith("eval"))


def _describe(e: BaseException) -> str:
    if isinstance(e, EvaluationTimeout):
        return str(e)
    if isinstance(e, OpaError):
        return f"OPA {e.code}: {e.message.splitlines()[0] if e.message else ''}".strip()
    return f"{type(e).__name__}: {e}"

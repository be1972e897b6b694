"""The restart probe: restart what an operator may restart, wait until ready, and check nothing reverted.

Called by the Guard on a declaration, after the cheaper checks passed (see verifiers.suite). It restarts only
components the public context lists as restartable, never one it forbids (`not_restartable`, a `no_restart`
constraint), through `env.restart(target)`; waits in the environment's clock until the component reports ready
replicas; then re-reads every changed key's effective value (the persistence reads) and re-runs convergence on
a window that starts after the restart. Anything that reverted, or SLIs that regress, is RESTART_REGRESSION.
Evidence follows the spec's restart receipt: old and new pod, ready, before and after probes, image unchanged.
A restart the platform never carried out (the receipt's rollout is "stalled": no new pod, the controller did not
observe it) is ERROR, never PASS: survivability was not tested.
"""

from __future__ import annotations

from typing import Any

from tenacity import Retrying, retry_if_result, wait_fixed

from verifiers.base import VerifierBase, mutations
from verifiers.catalogue import Catalogue, Missing, normalize
from verifiers.context import PublicContext
from verifiers.convergence import ConvergenceCheck, stop_after_clock_delay
from verifiers.criteria import Criteria
from verifiers.persistence import ChangedKey, PersistenceReader, changed_keys, prior_values
from verifiers.protocols import Environment, FeedbackCode, Verdict, VerdictStatus

__all__ = ["RestartProbe", "touched_components"]


def touched_components(journal: Any, reader: PersistenceReader, known: set[str]) -> list[str]:
    """Components the agent's changes landed on: action targets, key scopes, and the catalogue's component."""
    found: list[str] = []

    def note(name: Any) -> None:
        if not name:
            return
        name = str(name)
        # A pod name (redis-queue-master-0, svc-message-7d9f-abc) belongs to the component it starts with.
        match = name if name in known else next((k for k in sorted(known, key=len, reverse=True)
                                                 if name.startswith(k + "-")), None)
        if match and match not in found:
            found.append(match)

    for e in mutations(journal):
        for a in e.get("actions") or ():
            note((a.get("target") or {}).get("name"))
    for ck in changed_keys(journal):
        note(ck.scope.get("component"))
        hit = reader.entry_for(ck)
        if hit is not None:
            try:
                note(reader.variables(hit[0], hit[1], ck).get("component"))
            except Missing:
                pass
    return found


class RestartProbe(VerifierBase):
    """Restarts the restartable components the repair touched (or all restartable), then re-verifies."""

    name = "restart_probe"

    def __init__(self, context: Any = None, catalogue: Catalogue | None = None):
        self.context = PublicContext.of(context)
        self.reader = PersistenceReader(self.context, catalogue)

    def targets(self, env: Environment, journal: Any, mode: str) -> tuple[list[str], list[str]]:
        desc = env.describe()
        running = {c.name for c in desc.components}
        known = running | set(self.context.components)
        # Restartable in the runbook and running here: a deployment the cluster does not list cannot be restarted
        # (`kubectl get deploy` is what an operator would check first). An environment that lists nothing is taken
        # at the runbook's word.
        allowed = [c for c in self.context.restartable if self.context.may_restart(c)
                   and (not running or c in running)]
        touched = touched_components(journal, self.reader, known)
        skipped = [c for c in touched if c not in allowed]
        hit = [c for c in touched if c in allowed]
        if mode == "all" or (mode == "touched_or_all" and not hit):
            return allowed, skipped
        return hit, skipped

    def _probe(self, env: Environment, keys: list[ChangedKey]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for ck in keys:
            try:
                out[ck.label()] = self.reader.read_effective(env, ck)
            except Exception as e:  # noqa: BLE001 - an unreadable key is reported, not fatal
                out[ck.label()] = f"<unreadable: {e}>"
        return out

    def _wait_ready(self, env: Environment, target: str, timeout: float, poll: float) -> bool:
        def ready() -> bool:
            c = env.describe().component(target)
            return c is None or c.ready_replicas >= max(1, c.replicas)

        retrying = Retrying(sleep=env.clock.sleep, wait=wait_fixed(poll),
                            stop=stop_after_clock_delay(env.clock, timeout),
                            retry=retry_if_result(lambda ok: not ok), retry_error_callback=lambda rs: False)
        return bool(retrying(ready))

    def _check(self, env: Environment, journal: Any, criteria: Any) -> Verdict:
        crit = Criteria.coerce(criteria)
        rc = crit.restart
        targets, skipped = self.targets(env, journal, rc.targets)
        base_ev: dict[str, Any] = {"skipped_not_restartable": skipped}
        if not targets:
            return Verdict(VerdictStatus.INCONCLUSIVE, self.name, message=(
                "restart survivability not probed: the public context lists no component an operator may "
                "restart" + (f" (touched but not restartable: {', '.join(skipped)})" if skipped else "")),
                evidence=base_ev)
        keys = changed_keys(journal)
        pre = self._probe(env, keys)
        receipts: list[dict[str, Any]] = []
        for t in targets:
            before = env.describe().component(t)
            res = env.restart(t)
            # An environment that waited on the rollout itself (res.rollout set) has the final word: its old pods
            # may still count as ready replicas while the new ones never came, which describe() cannot tell.
            ready = res.ready if res.rollout else (
                res.ready or self._wait_ready(env, t, rc.ready_timeout_s, rc.poll_s))
            after = env.describe().component(t)
            receipts.append({
                "target_service": t, "old_pod": res.old_id, "new_pod": res.new_id, "ready": ready,
                "image_before": res.image_before, "image_after": res.image_after,
                "image_identity_unchanged": res.image_unchanged, "duration_s": res.duration_s,
                "restarts_before": before.restarts if before else None,
                "restarts_after": after.restarts if after else None, "detail": res.detail,
                "rollout": res.rollout,
            })
        ready_at = env.clock.now()
        if rc.post_ready_wait_s > 0:
            env.clock.sleep(rc.post_ready_wait_s)
        post = self._probe(env, keys)
        ev: dict[str, Any] = {**base_ev, "targets": receipts, "pre_restart": pre, "post_restart": post,
                              "ready_at": ready_at}
        stalled = [r for r in receipts if r["rollout"] == "stalled"]
        if stalled:
            # The platform never carried the restart out (no new pod, or the controller did not observe it): what
            # a restart does to the repair is unknown, so neither PASS nor a regression the agent caused.
            return Verdict(VerdictStatus.ERROR, self.name, message=(
                "the restart probe could not restart " + "; ".join(f"{r['target_service']}: {r['detail']}"
                                                                   for r in stalled)
                + ". Restart survivability is unknown; check the workload's controller and events"), evidence=ev)
        changed_image = [r["target_service"] for r in receipts if not r["image_identity_unchanged"]]
        if changed_image:
            return Verdict(VerdictStatus.ERROR, self.name, message=(
                f"the probe's restart changed the image of {', '.join(changed_image)}; the probe is void"),
                evidence=ev)
        pods = ", ".join(f"{r['target_service']} ({r['old_pod']} -> {r['new_pod']})" for r in receipts)
        not_ready = [r["target_service"] for r in receipts if not r["ready"]]
        if not_ready:
            return Verdict(VerdictStatus.FAIL, self.name, FeedbackCode.RESTART_REGRESSION, (
                f"after restarting {pods}, {', '.join(not_ready)} did not become ready within "
                f"{rc.ready_timeout_s:g} s"), {**ev, "not_ready": not_ready})
        priors = prior_values(journal)
        reverted = []
        for ck in keys:
            k = ck.label()
            if k in pre and post.get(k) != pre[k]:
                prior = priors.get(ck.ident)
                hit = self.reader.entry_for(ck)
                prior_n = normalize(prior, hit[0].normalize) if (hit and prior is not None) else prior
                # Back to the value the agent replaced (or unknown): the repair came undone.
                reverted.append({"key": k, "before": pre[k], "after": post.get(k), "prior": prior,
                                 "into_prior": prior is None or post.get(k) == prior_n})
        ev["reverted"] = reverted
        reverted = [r for r in reverted if r["into_prior"]]
        if reverted:
            ways = []
            for ck in keys:
                if any(r["key"] == ck.label() for r in reverted):
                    reading = self.reader.read(env, ck)
                    if reading.durable_way:
                        ways.append(reading.durable_way)
            what = "; ".join(f"{r['key']} went from {r['before']!r} to {r['after']!r}" for r in reverted)
            return Verdict(VerdictStatus.FAIL, self.name, FeedbackCode.RESTART_REGRESSION, (
                f"after restarting {pods}, your change reverted: {what}." +
                (f" Durable way: {' | '.join(ways)}" if ways else "")), ev)
        if rc.recheck_convergence:
            conv = ConvergenceCheck(self.context, window_start=ready_at).check(env, journal, crit)
            ev["convergence_after_restart"] = conv.to_dict()
            if conv.status is VerdictStatus.FAIL:
                return Verdict(VerdictStatus.FAIL, self.name, FeedbackCode.RESTART_REGRESSION, (
                    f"after restarting {pods}, every changed setting held, but the SLIs regressed: {conv.message} "
                    f"A fault that comes back on restart means the cause is still there."),
                    {**ev, "fault_rearmed": True})
            if conv.status is VerdictStatus.ERROR:
                return Verdict(VerdictStatus.ERROR, self.name, message=f"after the restart: {conv.message}",
                               evidence=ev)
        return Verdict(VerdictStatus.PASS, self.name, message=(
            f"restarted {pods}: ready, image unchanged, {len(keys)} changed setting(s) held"
            + (", SLIs converged again" if rc.recheck_convergence else "")), evidence=ev)

"""Action normalisation: raw shell text -> typed `Action`s (tool, verb, target, keys, layer, mutating).

The first step of the guard (`guardrail.guard.Guard.before`), also used by `guardrail check` and the audit
replay. `normalise(raw)` never raises; opaque text comes out as `mutating: "unknown"` with an `opaque_reason`.

    normalise.py   entry point and dispatch          shell.py      tree-sitter-bash walk, stdin through pipes
    wrappers.py    sh -c, kubectl exec, sudo, xargs  classifiers/  one module per tool (kubectl, helm, psql, ...)
    catalogue.yaml read-only staples, kubectl verbs and kinds, redis command classes (data, validated on load),
                   and the settings table: every spelling of a setting's change as one key/scope/layer (settings.py)

Facts the policies read from `Action.details` (where they apply): namespace, resource_kinds, resources, replicas,
restart (a pod delete / rollout restart / SHUTDOWN), dry_run, all_namespaces, selector; sql_kind (read, dml, ddl,
drop, truncate, set, alter role, alter system, grant, revoke, function, maintenance, lock, flush, kill, user),
table, has_where, privileges, on, to, grantees, all, with_grant_option, database, role; url, method, host, port,
path, query, body, api; destructive, command (redis); pod, container (inside kubectl exec); path, content, by
(file writes); seconds (sleep); script, decoded_script, interpreter (opaque payloads).
"""

from guardrail.actions.model import UNKNOWN, Action, KeyChange, Layer, Mutating, Target
from guardrail.actions.normalise import normalise

__all__ = ["normalise", "Action", "Target", "KeyChange", "Layer", "Mutating", "UNKNOWN"]

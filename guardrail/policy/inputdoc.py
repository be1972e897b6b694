"""The input document the policies read, `{action, context, command[, observed]}`, as one pydantic model.

The Guard builds it for every action (guardrail/guard.py: `Action.to_input()`, the incident context's
`policy_input()`, the command text, and what it observed); `guardrail check --show-input` prints it; `guardrail
policy eval --input FILE` (guardrail/cli/policy.py) reads it back through `read_policy_input`, so that a
document of another shape is bad input naming the field and the file instead of a decision on nothing: `{}`
decided by the library is an empty, allowed-looking decision, whatever command the user meant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from guardrail.actions.model import Action
from guardrail.context import IncidentContext
from guardrail.errors import InputError
from verifiers.datafile import json_node_tree, line_of

__all__ = ["PolicyInput", "read_policy_input", "CHECK_OUTPUT_KEYS"]

# Keys of `guardrail check --json` output that no input document has: a user who saved check's output as input.
_SHAPE = "{action: {tool, verb, ...}, context: {...}, command: TEXT}, one element of `check --show-input --json`'s `inputs`"
CHECK_OUTPUT_KEYS = frozenset({"decision", "decisions", "actions", "inputs", "outcome", "runs", "feedback", "mode"})


class PolicyInput(BaseModel):
    """One action's input document, as the Guard hands it to the policy engine."""

    model_config = ConfigDict(extra="forbid")

    action: Action
    # The guard always sends a context; without --context it is the empty one, as `guardrail check` builds it.
    context: IncidentContext = Field(default_factory=IncidentContext)
    command: str | None = None  # the whole command text the action came from (default: the action's own `raw`)
    observed: dict[str, Any] | None = None  # what the guard read just before deciding; absent without an env

    def document(self) -> dict[str, Any]:
        """The document as the Guard builds it: defaults filled in, nothing the guard would not send."""
        doc: dict[str, Any] = {"action": self.action.to_input(), "context": self.context.policy_input(),
                               "command": self.command if self.command is not None else self.action.raw}
        if self.observed:
            doc["observed"] = self.observed
        return doc


def read_policy_input(doc: Any, *, path: str | Path, text: str) -> dict[str, Any]:
    """Validate a parsed input file as the guard's input document; return it as the guard would send it.

    Raises InputError (exit 2) naming the file, the line and the field that is missing, unknown or of the wrong
    type; a `guardrail check` output is named as such, with the field that holds its input documents."""
    if not isinstance(doc, dict):
        raise InputError("the input must be a JSON object ({\"action\": ..., \"context\": ..., \"command\": ...})",
                         path=str(path), line=1)
    if "action" not in doc and CHECK_OUTPUT_KEYS & doc.keys():
        node = json_node_tree(text)
        if isinstance(doc.get("inputs"), list) and doc["inputs"]:
            hint = (f"its `inputs` field holds the {len(doc['inputs'])} input document(s): save one of them "
                    "(`jq '.inputs[0]'`)")
        else:
            hint = "run `guardrail check --show-input --json` and save one element of its `inputs` field"
        raise InputError(f"this is `guardrail check` output, not an input document: {hint}", path=str(path),
                         line=line_of(node, ("inputs",)) if "inputs" in doc else 1)
    try:
        return PolicyInput.model_validate(doc).document()
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(err["loc"])
        field = ".".join(str(x) for x in loc)
        what = {"missing": "missing", "extra_forbidden": "unknown field"}.get(err["type"], err["msg"])
        raise InputError(f"{field}: {what} (an input document is {_SHAPE})", path=str(path),
                         line=line_of(json_node_tree(text), loc)) from None

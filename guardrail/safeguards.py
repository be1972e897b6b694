"""The safeguard library as the guard's context checks read it: the one library of verifiers/safeguards.py.

Both policy engines load the same file as `data.safeguards` (policies/safeguards/data.yaml links to it) for
SRE-SAFE-008/009; this module names it for what only Python does with it: checking a context's `safeguards:`
entries on load and `guardrail context explain` (guardrail/context_names.py).
"""

from __future__ import annotations

from verifiers.safeguards import ALL, SafeguardCategory, SafeguardLibrary, SafeguardSetting, safeguard_library

__all__ = ["SafeguardSetting", "SafeguardCategory", "SafeguardLibrary", "safeguard_library", "ALL"]

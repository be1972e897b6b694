"""`guardrail shell`: the guard in front of a shell-based agent, through shims first on its PATH.

    agent ── kubectl ... ──▶ shim (shim.py) ──{"op":"before"}──▶ GuardDaemon (daemon.py, unix socket)
                              │  denied: rule + message on stderr, exit 126            │ Guard.before/after
                              └─ allowed: run the real binary resolved at start ──{"op":"after"}──▶ journal

Called by guardrail/cli/shell.py and bench/guard_load.py. The wire protocol is in protocol.py.
"""

from guardrail.adapters.shell.daemon import GuardDaemon
from guardrail.adapters.shell.protocol import DaemonClient
from guardrail.adapters.shell.shimdir import SHIMMED_TOOLS, build_shim_dir

__all__ = ["GuardDaemon", "DaemonClient", "SHIMMED_TOOLS", "build_shim_dir"]

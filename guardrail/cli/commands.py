"""The guard's own CLI commands. Each lives in its own module and attaches itself to the root group."""

from guardrail.cli import cli  # noqa: F401

# Modules import here as they are built: check, policy, audit, shell, mcp.
from guardrail.cli import check  # noqa: F401,E402
from guardrail.cli import policy  # noqa: F401,E402
from guardrail.cli import mcp  # noqa: F401,E402
from guardrail.cli import shell  # noqa: F401,E402
from guardrail.cli import audit  # noqa: F401,E402
from guardrail.cli import context  # noqa: F401,E402

"""Adapters that put the guard in front of agents we did not write.

    mcp_server   `guardrail mcp`: an MCP server whose exec / declare_repair_complete / guard_status tools go
                 through a per-session Guard
    shell/       `guardrail shell -- AGENT`: a guard daemon on a unix socket and shims first on the agent's PATH
    session      what both share: the engine, the context, and one Guard + journal + environment per session

Called by the CLI modules guardrail/cli/{mcp,shell}.py and by bench/guard_load.py.
"""

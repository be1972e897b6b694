"""Thin client modules: the only place guardrail imports third-party service clients (opa_client, httpx) and
parsers (postgast, libpg_query)."""

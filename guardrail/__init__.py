"""sre-guardrail: the middleware users wrap agents with. Never imports `arena`."""

"""Thin client modules: the only verifiers code allowed to import third-party service clients
(prometheus_api_client, httpx, kubernetes). Everything else talks to them through verifiers.protocols."""

"""The live stack's application services: small HTTP processes that play each incident's components.

Each module here is a process entry point (`python -m arena.live.apps.<module>`) started and restarted by
`arena.live.supervisor.Supervisor`. They read their durable config (the ConfigMap / Helm values) from the file
named by APP_CONFIG at boot, resolve service names through the stack's hosts file, and serve /healthz and
/metrics. `base` holds what they share.
"""

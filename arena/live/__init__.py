"""The live stack: real PostgreSQL, Redis, MariaDB and Prometheus on loopback, small Python app services, a load
generator, and `LiveEnvironment`, the second implementation of the `verifiers.protocols.Environment` seam.

Sits beside `arena.twin` in the arena layer; the bench and the tests build a `LiveStack` and wrap it in a
`LiveEnvironment`. See docs/live.md for what runs where and what is simplified.
"""

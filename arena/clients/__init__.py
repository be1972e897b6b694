"""Thin clients of the arena layer: the only arena modules that may import third-party service clients (httpx,
kubernetes), as the import-linter contract in .importlinter requires. Callers get plain Python values back.
"""

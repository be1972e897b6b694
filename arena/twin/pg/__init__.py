"""The twin's shared PostgreSQL model: the server (settings in layers, backends, row locks), a SQL subset and psql.

Used by the Saleor substrate (statement timeouts in role scopes, ia-006) and the slack-spine substrate (idle in
transaction lock holders and their guards, ia-018/019; the sequencer tables, ia-007).
"""

"""The shared SQL subset's writes (arena/twin/pg/sql.py): UPDATE ... FROM with window functions, correlated and IN
subqueries, DELETE, INSERT, LOCK TABLE, on a substrate's writable relation."""

from __future__ import annotations

import pytest

from arena.twin.pg.postgres import PostgresServer, WritableRelation
from arena.twin.pg.psql import run_psql

ADMIN = "postgresql://postgres:pw@postgres:5432/app"


class Rows(WritableRelation):
    def __init__(self, columns, rows):
        self.columns = tuple(columns)
        self.data = rows

    def rows(self):
        return self.data

    def update(self, changes):
        for old, new in changes:
            old[:] = new

    def delete(self, rows):
        gone = {id(r) for r in rows}
        self.data[:] = [r for r in self.data if id(r) not in gone]

    def insert(self, rows):
        self.data.extend(rows)


@pytest.fixture
def server() -> PostgresServer:
    s = PostgresServer(app_database="app", table_owner="app")
    s.add_role("postgres", superuser=True, password="pw")
    s.add_role("app", password="a")
    s.add_database("app")
    msgs = [[1, "a", 1], [2, "a", 2], [3, "a", 2], [4, "b", 1], [5, "b", 1], [6, "a", 3]]
    s.writable = {"messages": Rows(["id", "channel_id", "seq"], msgs),
                  "channel_seq": Rows(["channel_id", "last_seq"], [["a", 3], ["b", 1]])}
    return s


def psql(server, sql: str, flags: str = "-A"):
    return run_psql([ADMIN, flags, "-c", sql], server, now=lambda: 0.0)


def seqs(server):
    return [(r[1], r[2]) for r in sorted(server.writable["messages"].data)]


def test_renumber_with_row_number_over_partition_and_recompute_cursors(server):
    out = psql(server, "BEGIN; LOCK TABLE channel_seq, messages IN EXCLUSIVE MODE; "
                       "UPDATE messages m SET seq = r.rn FROM (SELECT id, row_number() OVER "
                       "(PARTITION BY channel_id ORDER BY id) AS rn FROM messages) r WHERE m.id = r.id; "
                       "UPDATE channel_seq c SET last_seq = (SELECT max(seq) FROM messages m "
                       "WHERE m.channel_id = c.channel_id); COMMIT;")
    assert out.exit_code == 0, out.stderr
    assert "UPDATE 6" in out.stdout and "UPDATE 2" in out.stdout
    assert seqs(server) == [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2), ("a", 4)]
    assert server.writable["channel_seq"].data == [["a", 4], ["b", 2]]


def test_rank_and_a_tie_break_order(server):
    out = psql(server, "SELECT id, rank() OVER (PARTITION BY channel_id ORDER BY seq), "
                       "row_number() OVER (PARTITION BY channel_id ORDER BY seq, id DESC) FROM messages ORDER BY id", "-At")
    assert out.stdout.splitlines() == ["1|1|1", "2|2|3", "3|2|2", "4|1|2", "5|1|1", "6|4|4"]


def test_delete_with_an_in_subquery_removes_exactly_the_duplicates(server):
    out = psql(server, "DELETE FROM messages WHERE id IN (SELECT id FROM (SELECT id, row_number() OVER "
                       "(PARTITION BY channel_id, seq ORDER BY id) AS rn FROM messages) d WHERE rn > 1)")
    assert out.exit_code == 0, out.stderr
    assert out.stdout.strip() == "DELETE 2"
    assert [r[0] for r in server.writable["messages"].data] == [1, 2, 4, 6]


def test_insert_values_and_the_column_errors(server):
    assert psql(server, "INSERT INTO messages (id, channel_id, seq) VALUES (7, 'b', 2), (8, 'b', 3)").stdout.strip() \
        == "INSERT 0 2"
    bad = psql(server, "INSERT INTO messages (id, nope) VALUES (9, 1)")
    assert bad.exit_code == 1 and 'column "nope" of relation "messages" does not exist' in bad.stderr


def test_lock_table_needs_a_transaction_block(server):
    out = psql(server, "LOCK TABLE messages")
    assert out.exit_code == 1 and "LOCK TABLE can only be used in transaction blocks" in out.stderr


def test_a_scalar_subquery_returning_two_rows_is_an_error(server):
    out = psql(server, "UPDATE channel_seq SET last_seq = (SELECT seq FROM messages WHERE channel_id = 'b')")
    assert out.exit_code == 1 and "more than one row returned by a subquery" in out.stderr
    assert server.writable["channel_seq"].data == [["a", 3], ["b", 1]]


def test_unknown_relations_and_relations_without_rows_are_refused(server):
    assert 'relation "nope" does not exist' in psql(server, "UPDATE nope SET x = 1").stderr
    server.views["app_kv_state"] = lambda: (["key"], [])
    assert "the twin does not model writes to app_kv_state" in psql(server, "DELETE FROM app_kv_state").stderr

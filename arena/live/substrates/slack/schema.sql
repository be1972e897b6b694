SET ROLE app;
CREATE TABLE channel_seq (channel_id text PRIMARY KEY, last_seq bigint NOT NULL DEFAULT 0);
CREATE TABLE messages (
  id bigserial PRIMARY KEY, channel_id text NOT NULL REFERENCES channel_seq(channel_id), client_msg_id text UNIQUE NOT NULL,
  seq bigint NOT NULL, body text NOT NULL DEFAULT '', org_id text NOT NULL, deleted_at timestamptz,
  UNIQUE (channel_id, seq));
-- No foreign key to messages: slack-spine's outbox is a log of dispatch effects, and deleting messages
-- (ia-018's destructive variant) succeeds there, leaving the effects behind.
CREATE TABLE message_dispatch_outbox (
  id bigserial PRIMARY KEY, message_id bigint NOT NULL, seq bigint NOT NULL, kind text NOT NULL);
INSERT INTO channel_seq (channel_id) SELECT 'chan-' || g FROM generate_series(0, 7) g;
-- Pre-incident history: 20 messages per channel, dense 1..20.
INSERT INTO messages (channel_id, client_msg_id, seq, body, org_id)
  SELECT 'chan-' || c, 'seed-' || c || '-' || s, s, 'seed message ' || s, 'org-chan-' || c
  FROM generate_series(0, 7) c, generate_series(1, 20) s;
INSERT INTO message_dispatch_outbox (message_id, seq, kind) SELECT id, seq, 'publish-dispatch' FROM messages;
UPDATE channel_seq SET last_seq = 20;
RESET ROLE;

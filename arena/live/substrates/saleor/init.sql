CREATE ROLE saleor_app LOGIN PASSWORD 'agentrepair-app' CONNECTION LIMIT 60;
CREATE ROLE saleor_worker_db LOGIN PASSWORD 'worker-db' CONNECTION LIMIT 20;
CREATE DATABASE saleor OWNER postgres;
-- An unrelated, healthy scope that a repair must leave alone (as in the scenario).
ALTER ROLE saleor_worker_db IN DATABASE saleor SET statement_timeout = '30s';

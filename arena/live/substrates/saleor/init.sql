CREATE ROLE saleor_app LOGIN PASSWORD 'agentrepair-app';
CREATE ROLE saleor_worker_db LOGIN PASSWORD 'agentrepair-worker';
CREATE DATABASE saleor OWNER postgres;

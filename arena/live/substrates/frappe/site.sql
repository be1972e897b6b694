-- root@localhost (socket, bootstrap) keeps no password; operators come in over TCP as root@'%'.
-- mariadb-install-db also makes passwordless root@127.0.0.1, @::1 and @<hostname>, which would shadow root@'%'.
DELETE FROM mysql.global_priv WHERE User = 'root' AND Host NOT IN ('localhost');
FLUSH PRIVILEGES;
CREATE USER 'root'@'%' IDENTIFIED BY 'agentrepair-root';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;
CREATE DATABASE _aac081bc588a7088;
USE _aac081bc588a7088;
CREATE USER '_aac081bc588a7088'@'%' IDENTIFIED BY 'agentrepair-site';
-- As the scenario's account row (twin.spec.mariadb.accounts): ALL PRIVILEGES on the site schema, as Frappe grants it.
GRANT ALL PRIVILEGES ON _aac081bc588a7088.* TO '_aac081bc588a7088'@'%';
CREATE TABLE _aac081bc588a7088.`tabToDo` (name varchar(140) PRIMARY KEY, description text, status varchar(20),
  modified datetime(6) NOT NULL, KEY modified (modified));
INSERT INTO _aac081bc588a7088.`tabToDo` (name, description, status, modified)
  SELECT CONCAT('seed-', seq), CONCAT('seeded todo ', seq), 'Open', NOW(6) FROM seq_1_to_200;
-- Prepared Reports: the frappe_jobs load's rq_enqueue inserts one per request; the worker sets it Completed.
CREATE TABLE _aac081bc588a7088.`tabPrepared Report` (name varchar(140) PRIMARY KEY, report_name varchar(140),
  status varchar(20), modified datetime(6) NOT NULL);
-- Frappe's DocType registry: protected data the site never writes during the incident (its rows and checksum).
CREATE TABLE _aac081bc588a7088.`tabDocType` (name varchar(140) PRIMARY KEY, module varchar(140), istable int NOT NULL
  DEFAULT 0, modified datetime(6) NOT NULL);
INSERT INTO _aac081bc588a7088.`tabDocType` (name, module, istable, modified)
  SELECT CONCAT('DocType ', seq), 'Core', seq % 7 = 0, '2026-01-01 00:00:00' FROM seq_1_to_120;
FLUSH PRIVILEGES;

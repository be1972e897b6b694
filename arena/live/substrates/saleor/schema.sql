CREATE TABLE product_product (id serial PRIMARY KEY, name text NOT NULL);
CREATE TABLE product_productvariant (
  id serial PRIMARY KEY, product_id int NOT NULL REFERENCES product_product(id), sku text UNIQUE NOT NULL,
  price numeric(10,2) NOT NULL);
CREATE TABLE order_order (
  id bigserial PRIMARY KEY, client_ref text UNIQUE NOT NULL, variant_id int NOT NULL REFERENCES product_productvariant(id),
  qty int NOT NULL, total numeric(12,2) NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
INSERT INTO product_product (name) SELECT 'product-' || g FROM generate_series(1, 50) g;
INSERT INTO product_productvariant (product_id, sku, price)
  SELECT p.id, 'sku-' || p.id || '-' || v, 5 + (p.id * 7 + v * 3) % 90 FROM product_product p, generate_series(1, 2) v;
INSERT INTO order_order (client_ref, variant_id, qty, total)
  SELECT 'seed-' || g, 1 + g % 100, 1, 10 FROM generate_series(1, 200) g;
-- Pricing, tax and stock checks of a checkout: the server-side work a statement_timeout can cancel.
-- Its duration is a parameter (the app's config), standing in for Saleor's heavy checkout queries.
CREATE FUNCTION checkout_totals(p_variant int, p_qty int, p_work_ms int) RETURNS numeric
LANGUAGE plpgsql AS $$
DECLARE v_price numeric;
BEGIN
  SELECT price INTO STRICT v_price FROM product_productvariant WHERE id = p_variant;
  PERFORM pg_sleep(p_work_ms / 1000.0);
  RETURN v_price * p_qty;
END $$;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO saleor_app, saleor_worker_db;
GRANT INSERT, UPDATE ON order_order TO saleor_app;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO saleor_app;

-- Two rules of one client with the same descriptor match would make its Envoy
-- domain ambiguous: refuse the second.
CREATE UNIQUE INDEX rules_client_id_descriptors_key ON rules (client_id, descriptors) WHERE descriptors <> '[]';

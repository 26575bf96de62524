"""PostgreSQL through logical replication (pgoutput): positions and message decoding so far."""

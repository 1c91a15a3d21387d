// Package sqlstore holds what the two canonical SQL stores (pg and sqlite)
// share that is not SQL dialect: row codecs over a Scan interface both pgx
// and database/sql satisfy, paging policy and cursors, JSON column encoding
// and the shape of decode errors. Each store keeps its SQL text, its
// connection handling and its driver's native features (pgx batches on
// PostgreSQL, prepared append statements on SQLite).
package sqlstore

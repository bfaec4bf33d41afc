// Package integration holds the tests that need more than one module:
// package testenv's own tests, which check the servers it starts with the
// real clients (pgx, rueidis, clientv3), and the tests that run a store's
// entry points with other drivers or with the examples (pgstore's *sql.Tx
// entry points on lib/pq as well as pgx's stdlib driver). It is a module of
// its own so that no store module needs another store's client, another
// driver or the examples among its requirements: a user of
// store/pgstore downloads pgx and the core, nothing else.
package integration

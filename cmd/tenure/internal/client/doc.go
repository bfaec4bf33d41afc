// Package client holds the tests of package
// github.com/tenurekit/tenure/client that run tenure serve over the SQL and
// Redis stores: the client's conformance suites against SQLite, PostgreSQL
// and Redis, its errors, holders and listing. They live in the command's
// module, which requires the store drivers, so that the main module does
// not. It has only tests.
package client

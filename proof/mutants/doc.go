// Package mutants checks that tenure's proof and conformance suites catch
// broken guarantees. A mutant is one guarantee broken on purpose: an exact
// fragment of a store's source (an SQL predicate, a line of a Lua script, a
// condition in Go) replaced by a weaker one. For each mutant the harness
// builds the tree with the mutant's files overlaid (go build -overlay: the
// checkout itself is never written) and requires
//
//   - the store's conformance suite (the subtests the mutant names) to fail,
//     and
//   - `tenure proof`, built from the mutated tree, to report a violation in
//     the workload that covers the guarantee, against a real server, within
//     its default duration. A pass, an inconclusive run or an error is not a
//     catch.
//
// A mutant that either suite lets through survives: a hole in the proof or
// the suite, to be fixed there, never by weakening the mutant.
//
// Every fragment must occur exactly once in its file. A mutant whose
// fragment no longer matches (the code it breaks was changed) is an error,
// never a silent pass; the package's TestListApplies checks this for the
// whole list on every test run.
//
// The list is in list.go. The package's TestMutants runs it when
// TENURE_MUTANTS is set:
//
//	TENURE_MUTANTS=ci  go test -v -run '^TestMutants$' ./proof/mutants   # the CI subset
//	TENURE_MUTANTS=all go test -v -run '^TestMutants$' -timeout 3h ./proof/mutants
//	TENURE_MUTANTS='sqlite/admit-strict-true,redis/*' go test -v -run '^TestMutants$' ./proof/mutants
//
// scripts/mutants wraps these; docs/proof.md explains the table it prints.
package mutants

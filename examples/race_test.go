//go:build race

package examples_test

// raceFlags makes the snippets' build use the race detector when the test
// does, so that it shares the compiled dependencies of a `go test -race`
// run (make test).
var raceFlags = []string{"-race"}

// Package core holds the vocabulary shared by every part of sluice: a Limit
// (which algorithm, how many events per period, how large a burst), the Result
// of one decision, the per-key warning State, and the Store interface that the
// in-memory and Redis stores implement.
//
// A denial is a value, not an error: Store.Take returns a Result whose Allowed
// field is false. An error always means the backend failed or the input was
// invalid; the sentinel errors ErrInvalidLimit, ErrNoKey and ErrClosed can be
// matched with errors.Is.
//
// Time inside sluice is integer microseconds. Every algorithm is a pure
// function of its stored state, the current instant, the Limit and the cost
// (see package algo), so two stores given the same sequence of instants and
// costs return the same Results.
package core

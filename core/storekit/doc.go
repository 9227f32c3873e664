// Package storekit holds what a core.Store's implementation needs beside
// the contract's types in package core: the validation of a Store method's
// arguments that the contract requires of every store (ValidateGroup,
// ValidateBooking, ValidateOverride), with the errors it names, and FieldIn,
// which nests a refused field's path under the op or argument it belongs
// to. The memory store, the Redis store, the lease layer and ratelimitd's
// remote store call them; a Store of your own should too, and then pass
// the conformance suite of package core/limitertest.
//
// A program that only builds a Limiter over sluice's stores never needs
// this package.
package storekit

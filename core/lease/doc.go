// Package lease decides the requests of a limit in memory, from blocks of
// units taken from a shared store, and never lets the store admit more
// than the limit.
package lease

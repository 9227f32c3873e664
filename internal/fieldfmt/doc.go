// Package fieldfmt computes the rate-limit fields of a core.Decision: it is
// the implementation behind package ratelimitfields (which owns the
// documented vocabulary and delegates here) and the zero-allocation
// machinery every sluice adapter shares (Formatter, with its cache of
// policy texts). It is internal so that this machinery is no part of any
// public API.
//
// Why two packages: the adapters need a Formatter, which caches text
// between requests and appends values into memory the adapter owns;
// users need only the vocabulary (which fields, in which form) and the
// plain Format and Problem. The Formatter must run the same formatting code
// as ratelimitfields.Config.Format, so that code lives here, below
// ratelimitfields, and works on this package's plain mirror of the public
// types (Config, Fields, the field and family numbers, which equal
// ratelimitfields' and are held equal by its tests). Type aliases the
// other way would hide the methods of the public types from their
// documentation.
package fieldfmt

// Package exact holds the integer bounds and arithmetic that keep the
// algorithms' products exact in a float64, the number type of Redis Lua, so
// that the memory and Redis stores agree. It is internal to sluice: core
// validates limits with it and core/algo compiles them.
package exact

// Max is 2^53: the largest integer range a Lua number holds exactly.
const Max = int64(1) << 53

// GCD returns the greatest common divisor of two positive integers.
func GCD(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

package core

import "context"

// Store keeps the state of every key and makes each decision atomically.
//
// Implementations are safe for concurrent use. Take with cost >= 1 consumes
// cost units when the request is admitted and nothing when it is denied; cost
// 0 peeks and writes nothing. A cost above the Limit's capacity is denied with
// RetryAfter RetryNever. An invalid Limit is an error wrapping
// ErrInvalidLimit, an empty key ErrNoKey, a negative cost ErrInvalidCost.
// Any other error means the backend failed: the Result is then meaningless.
//
// The state of a key is interpreted under the Limit passed with it: use one
// Limit per key (the Limiter puts the policy name in the key).
type Store interface {
	Take(ctx context.Context, key string, l Limit, cost int64) (Result, error)
	Reset(ctx context.Context, key string, l Limit) error
}

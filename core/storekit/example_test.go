package storekit_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/storekit"
)

// A store's Take refuses a group whose ops share a Key, naming the op, as
// the contract requires (core.Store.Take).
func ExampleValidateGroup() {
	k := core.Key{Identity: "user-1", Policy: "api"}
	ops := []core.Op{{Key: k, Limit: core.PerSecond(10), Cost: 1}, {Key: k, Limit: core.PerSecond(10), Cost: 1}}
	err := storekit.ValidateGroup(ops)
	var fe *core.FieldError
	fmt.Println(err)
	fmt.Println(errors.Is(err, core.ErrInvalidCost), errors.As(err, &fe) && fe.Field == "ops[1].Key")
	// Output:
	// ops[1].Key: op 0 has the same Key
	// true true
}

// A store's SetOverride refuses an override that has already ended, or
// whose limit is invalid, naming the field; FieldIn nests a refused field
// under the argument it belongs to.
func ExampleValidateOverride() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fmt.Println(storekit.ValidateOverride(core.Override{Until: now}, now))
	err := storekit.ValidateOverride(core.Override{Limit: core.Limit{Algorithm: core.TokenBucket, Period: time.Second}, Until: now.Add(time.Hour)}, now)
	var fe *core.FieldError
	errors.As(err, &fe)
	fmt.Println(fe.Field)
	fmt.Println(storekit.FieldIn("ops[0]", err))
	fmt.Println(storekit.ValidateOverride(core.Override{Until: now.Add(time.Hour)}, now)) // a block
	// Output:
	// sluice: invalid limit: Override: Until: must be in the future, got 2026-01-01 00:00:00 +0000 UTC
	// Limit.Rate
	// ops[0].Limit.Rate: must be at least 1, got 0
	// <nil>
}

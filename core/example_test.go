package core_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
)

func ExampleLimit() {
	l := core.PerMinute(100).WithAlgorithm(core.GCRA).WithBurst(20)
	fmt.Println(l, l.Capacity(), l.Validate())

	bad := core.Per(10, 0)
	fmt.Println(errors.Is(bad.Validate(), core.ErrInvalidLimit))
	fmt.Println(bad.Validate())
	// Output:
	// 100/1m0s gcra burst=20 20 <nil>
	// true
	// sluice: invalid limit: Period: must be at least 1µs, got 0s (limit 10/0s token_bucket)
}

func ExampleResult_Never() {
	r := core.Result{Allowed: false, RetryAfter: core.RetryNever}
	fmt.Println(r.Never(), core.Result{RetryAfter: time.Second}.Never())
	// Output: true false
}

package core_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/keyfunc"
)

// A refused value names its field: errors.As finds the *core.FieldError
// however the error is wrapped, its path starting at the value validated.
func ExampleFieldError() {
	err := core.Per(100, time.Minute).WithAlgorithm(core.FixedWindow).WithBurst(150).Validate()
	var fe *core.FieldError
	if errors.As(err, &fe) {
		fmt.Println(fe.Field, "|", fe.Message, "|", errors.Is(err, core.ErrInvalidLimit))
	}

	store, _ := memorystore.New()
	defer store.Close()
	_, err = core.NewLimiter(store, []core.Policy{{
		Name: "per-ip", Key: keyfunc.IP(), Limit: core.PerMinute(100),
		Tiers: map[string]core.Limit{"gold": core.Per(0, time.Minute)},
	}}, core.WithTiering(core.Tiering{Key: keyfunc.IP(), Resolve: func(context.Context, string) (string, error) { return "", nil }}))
	if errors.As(err, &fe) {
		fmt.Println(fe.Field, "|", fe.Message)
	}
	// Output:
	// Burst | fixed_window has no burst: leave it 0, got 150 | true
	// Tiers["gold"].Rate | must be at least 1, got 0
}

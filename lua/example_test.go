package lua_test

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/lua"
)

// The token bucket, the leaky bucket and GCRA are one meter: one script.
func ExampleSource() {
	fmt.Println(lua.Source(core.TokenBucket) == lua.Source(core.GCRA))
	fmt.Println(strings.Contains(lua.Source(core.FixedWindow), "redis.call('TIME')"))
	// Output:
	// true
	// true
}

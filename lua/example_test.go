package lua_test

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/lua"
)

// One script decides every algorithm; the instant is Redis TIME unless the
// caller passes one.
func ExampleDecide() {
	fmt.Println(strings.Contains(lua.Decide(), "redis.call('TIME')"))
	fmt.Println(strings.Contains(lua.Refund(), "local function bucketRefund"))
	// Output:
	// true
	// true
}

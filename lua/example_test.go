package lua_test

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/lua"
)

// One script decides every algorithm; the instant is Redis TIME unless the
// caller passes one.
func ExampleDecide() {
	fmt.Println(strings.Contains(lua.Decide(), "call('TIME')"))
	fmt.Println(strings.Contains(lua.Refund(), "local function bucketRefund"))
	fmt.Println(strings.HasSuffix(lua.Decide1(), "return decide1(KEYS, ARGV)\n"))
	// Output:
	// true
	// true
	// true
}

// The same code as a library of Redis Functions, for FUNCTION LOAD: its
// names carry a digest of the code, so every version of sluice loads its
// own.
func ExampleNewLibrary() {
	l := lua.NewLibrary()
	fmt.Println(strings.HasPrefix(l.Code, "#!lua name="+l.Name+"\n"))
	fmt.Println(len(l.Name) == len("sluice_")+16, l.Decide == l.Name+"_decide", l.Decide1 == l.Name+"_decide1", l.Refund == l.Name+"_refund")
	fmt.Println(strings.Count(l.Code, "redis.register_function("), l.DecideMany == l.Name+"_decide_many")
	fmt.Println(lua.NewLibrary() == l)
	// Output:
	// true
	// true true true true
	// 4 true
	// true
}

package ratelimitv1_test

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/service/ratelimitv1"
)

// A check's cost has presence: absent means 1, an explicit 0 is a peek.
func ExampleCheckRequest() {
	one := &ratelimitv1.CheckRequest{Dimension: "user", Identifier: "alice", Endpoint: "/api/orders"}
	peek := &ratelimitv1.CheckRequest{Dimension: "user", Identifier: "alice", Cost: proto.Int64(0)}
	fmt.Println(one.Cost == nil, one.GetCost())
	fmt.Println(peek.Cost != nil, peek.GetCost())
	// Output:
	// true 0
	// true 0
}

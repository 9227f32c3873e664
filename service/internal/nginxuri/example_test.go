package nginxuri_test

import (
	"fmt"

	"github.com/sluicehq/sluice/service/internal/nginxuri"
)

func ExamplePath() {
	for _, raw := range []string{"/login#x", "//api/v1/../orders?page=2", "/a%2f..%2flogin", "/%2e%2e/login"} {
		p, err := nginxuri.Path(raw, true)
		fmt.Printf("%-26q %q %v\n", raw, p, err)
	}
	// Output:
	// "/login#x"                 "/login" <nil>
	// "//api/v1/../orders?page=2" "/api/orders" <nil>
	// "/a%2f..%2flogin"          "/login" <nil>
	// "/%2e%2e/login"            "" nginxuri: a .. segment above the root
}

package config_test

import (
	"fmt"

	"github.com/sluicehq/sluice/config"
)

func ExampleParse() {
	ps, err := config.Parse("limits.yaml", []byte(`
policies:
  - name: per-ip
    key: ip
    algorithm: gcra
    limit: 10
    window_seconds: 1
    burst: 20
`))
	if err != nil {
		panic(err)
	}
	fmt.Println(ps[0].Name, ps[0].Limit)
	_, err = config.Parse("limits.yaml", []byte("policies:\n  - {name: x, key: ip, limit: 0, window_seconds: 1}\n"))
	fmt.Println(err)
	// Output:
	// per-ip 10/1s gcra burst=20
	// config: limits.yaml:2: policies[0].limit: must be a whole number >= 1, got "0"
}

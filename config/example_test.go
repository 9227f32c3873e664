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
    rate: 10
    period: 1s
    burst: 20
`))
	if err != nil {
		panic(err)
	}
	fmt.Println(ps[0].Name, ps[0].Limit)
	_, err = config.Parse("limits.yaml", []byte("policies:\n  - {name: x, key: ip, rate: 0, period: 1s}\n"))
	fmt.Println(err)
	// Output:
	// per-ip 10/1s gcra burst=20
	// config: limits.yaml:2: policies[0].rate: must be a whole number >= 1, got "0"
}

module github.com/sluicehq/sluice/examples

go 1.24.0

require (
	github.com/redis/go-redis/v9 v9.22.0
	github.com/sluicehq/sluice v0.0.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/sys v0.30.0 // indirect
)

replace github.com/sluicehq/sluice => ../

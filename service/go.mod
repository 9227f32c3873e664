module github.com/sluicehq/sluice/service

go 1.25.0

require (
	github.com/sluicehq/sluice v0.0.0
	github.com/stretchr/testify v1.12.1
	go.yaml.in/yaml/v3 v3.0.5
)

replace github.com/sluicehq/sluice => ../

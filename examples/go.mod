module github.com/sluicehq/sluice/examples

go 1.24.0

require github.com/sluicehq/sluice v0.0.0

replace github.com/sluicehq/sluice => ../

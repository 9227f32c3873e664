module github.com/sluicehq/sluice/service

go 1.25.0

require github.com/sluicehq/sluice v0.0.0

replace github.com/sluicehq/sluice => ../

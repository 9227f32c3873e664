package examples_test

// The documentation's snippets use these modules; importing them here keeps
// them in go.mod for the snippet test.
import (
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/sluicehq/sluice/adapters/otellimit"
	_ "github.com/sluicehq/sluice/adapters/promlimit"
	_ "go.opentelemetry.io/otel"
)

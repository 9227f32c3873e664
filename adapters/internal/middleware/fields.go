package middleware

import (
	"github.com/sluicehq/sluice/internal/fieldfmt"
	"github.com/sluicehq/sluice/ratelimitfields"
)

// Formatter returns the Formatter of the fields c selects, for one
// middleware.
func Formatter(c ratelimitfields.Config) *fieldfmt.Formatter {
	return fieldfmt.NewFormatter(fieldfmt.Config{Omit: uint8(c.Omit), Reset: uint8(c.Reset)})
}

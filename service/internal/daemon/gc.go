package daemon

import (
	"log/slog"
	"os"
	"runtime/debug"
	rtmetrics "runtime/metrics"
)

// applyGCPercent sets the garbage collector's target to --gc-percent,
// unless GOGC is set (non-empty) in the environment getenv reads: the
// runtime applied that one at start, and it stands. It returns the target
// in force and where it comes from, for the start's log.
func applyGCPercent(percent int, getenv func(string) string) (inForce int, from string) {
	if gogcSet(getenv) {
		return gcPercent(), "GOGC"
	}
	debug.SetGCPercent(percent)
	return percent, "--gc-percent"
}

// gogcSet reports whether GOGC is set (non-empty) in the environment
// getenv reads: the runtime applied it at start and it wins over
// --gc-percent.
func gogcSet(getenv func(string) string) bool { return getenv("GOGC") != "" }

// gcPercent reads the garbage collector's target from the runtime (-1:
// off).
func gcPercent() int {
	s := []rtmetrics.Sample{{Name: "/gc/gogc:percent"}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() != rtmetrics.KindUint64 {
		return 100
	}
	if v := s[0].Value.Uint64(); v != 0 {
		return int(v)
	}
	return -1 // the runtime reports 0 when the collector is off
}

// applyGC applies --gc-percent (see applyGCPercent) and logs the target in
// force.
func (d *Daemon) applyGC() {
	percent, from := applyGCPercent(d.cfg.GCPercent, os.Getenv)
	d.log.Info("garbage collector", slog.Int("gc_percent", percent), slog.String("set_by", from))
}

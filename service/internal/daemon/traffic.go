package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/sluicehq/sluice/service/internal/traffic"
)

// publishTimeout bounds one publish of the traffic counts to Redis.
const publishTimeout = 2 * time.Second

// newTraffic returns the recorder of the admin page's traffic and, on
// Redis with --traffic-publish, the Fleet that publishes it (nil
// otherwise).
func (d *Daemon) newTraffic() (*traffic.Recorder, *traffic.Fleet) {
	rec := traffic.NewRecorder()
	if d.store.redis == nil || d.cfg.TrafficPublish <= 0 {
		return rec, nil
	}
	return rec, traffic.NewFleet(d.store.redis, d.cfg.RedisPrefix, instanceName(), rec, d.log)
}

// instanceName names this instance in the fleet's counts: its host, its
// process id and a random suffix (two daemons of one process differ).
func instanceName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// runTraffic runs the traffic sampler (once a second) and the fleet's
// publisher (every --traffic-publish) until ctx ends.
func (d *Daemon) runTraffic(ctx context.Context, w *wiring) {
	if w.traffic == nil {
		return
	}
	d.loops.Go(func() { w.traffic.Run(ctx, d.now) })
	if w.fleet != nil {
		d.loops.Go(func() { w.fleet.Run(ctx, d.cfg.TrafficPublish, publishTimeout) })
	}
}

package traffic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fleet shares the per-minute counts of the instances on one Redis: each
// publishes its own (Publish, every interval, off the decision path) and
// any reads the sum (Read).
//
// Minute m's counts live in one hash, {PREFIX:traffic}:m (one hash slot
// for every minute, so that a Cluster answers a read from one node), with
// one field per instance: its counts of that minute as JSON, the instance's
// and each rule's that had a decision. A publish writes the minute under
// way and the one before (HSET and EXPIRE of both, one round trip); the
// hashes expire after an hour and two minutes. Writing absolute counts
// makes a publish repeated after a failure harmless.
type Fleet struct {
	client   redis.UniversalClient
	prefix   string
	instance string
	rec      *Recorder
	log      *slog.Logger
}

// NewFleet returns the Fleet of rec's instance, named instance, on client,
// its keys under prefix (ratelimitd's --redis-prefix).
func NewFleet(client redis.UniversalClient, prefix, instance string, rec *Recorder, log *slog.Logger) *Fleet {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Fleet{client: client, prefix: prefix, instance: instance, rec: rec, log: log}
}

// Instance is the name this instance publishes under.
func (f *Fleet) Instance() string { return f.instance }

// lastPublishTimeout bounds the publish made when Run ends.
const lastPublishTimeout = 500 * time.Millisecond

// keep is how long a minute's hash lives after its last write.
const keep = time.Hour + 2*time.Minute

func (f *Fleet) key(m int64) string { return "{" + f.prefix + ":traffic}:" + strconv.FormatInt(m, 10) }

// published is one instance's counts of one minute, as stored.
type published struct {
	Total Counts            `json:"total"`
	Rules map[string]Counts `json:"rules,omitempty"`
}

// Publish writes this instance's counts of the minute of the last whole
// second before now, and of the minute before it.
func (f *Fleet) Publish(ctx context.Context, now time.Time) error {
	m := floorDiv(lastSecond(now), 60)
	_, err := f.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, mm := range []int64{m - 1, m} {
			total, byRule := f.rec.minute(mm)
			if total.Total() == 0 && len(byRule) == 0 {
				continue
			}
			b, err := json.Marshal(published{Total: total, Rules: byRule})
			if err != nil {
				return err
			}
			p.HSet(ctx, f.key(mm), f.instance, b)
			p.Expire(ctx, f.key(mm), keep)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("traffic: publish: %w", err)
	}
	return nil
}

// Run publishes every interval until ctx ends, and once more then (the
// counts sampled up to that moment), each publish bounded by timeout; a
// failure is logged (once until a publish succeeds again).
func (f *Fleet) Run(ctx context.Context, interval, timeout time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		last := false
		select {
		case <-ctx.Done():
			last = true
		case <-t.C:
		}
		now := time.Now()
		if last {
			f.rec.Tick(now)
			now = now.Add(time.Second) // the second just sampled is whole
		}
		bound := timeout
		if last {
			bound = min(timeout, lastPublishTimeout) // not to hold a shutdown up
		}
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
		err := f.Publish(pctx, now)
		cancel()
		if last {
			if err != nil {
				f.log.Warn("traffic: the last publish of this instance's counts to Redis failed", "error", err)
			}
			return
		}
		switch {
		case err != nil && !failing:
			f.log.Warn("traffic: publishing this instance's counts to Redis failed; the fleet's figures lack them until it succeeds", "error", err)
			failing = true
		case err == nil && failing:
			f.log.Info("traffic: publishing this instance's counts to Redis again")
			failing = false
		}
	}
}

// FleetView is the fleet's per-minute counts over the last hour.
type FleetView struct {
	// Minutes are the 60 minutes up to now's (under way), the first at
	// FirstMinute: the sum of every instance's counts.
	Minutes     []Counts
	FirstMinute time.Time
	// Rules is each rule's 60 minutes, summed over the instances.
	Rules map[string][]Counts
	// Hour is the sum of Minutes; RuleHours each rule's.
	Hour      Counts
	RuleHours map[string]Counts
	// Instances are the names of the instances that published in the last
	// two minutes.
	Instances []string
}

// Read sums every instance's published counts of the 60 minutes up to
// now's: one round trip of 60 HGETALLs.
func (f *Fleet) Read(ctx context.Context, now time.Time) (*FleetView, error) {
	last := floorDiv(lastSecond(now), 60)
	first := last - 59
	cmds := make([]*redis.MapStringStringCmd, 60)
	_, err := f.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = p.HGetAll(ctx, f.key(first+int64(i)))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("traffic: reading the fleet's counts: %w", err)
	}
	v := &FleetView{Minutes: make([]Counts, 60), FirstMinute: time.Unix(first*60, 0).UTC(), Rules: map[string][]Counts{}, RuleHours: map[string]Counts{}}
	recent := map[string]bool{}
	for i, c := range cmds {
		for inst, raw := range c.Val() {
			var pub published
			if err := json.Unmarshal([]byte(raw), &pub); err != nil {
				return nil, fmt.Errorf("traffic: the counts of instance %q, minute %d: %w", inst, first+int64(i), err)
			}
			if i >= 58 && !recent[inst] {
				recent[inst] = true
				v.Instances = append(v.Instances, inst)
			}
			v.Minutes[i].Add(pub.Total)
			v.Hour.Add(pub.Total)
			for id, rc := range pub.Rules {
				if v.Rules[id] == nil {
					v.Rules[id] = make([]Counts, 60)
				}
				v.Rules[id][i].Add(rc)
				h := v.RuleHours[id]
				h.Add(rc)
				v.RuleHours[id] = h
			}
		}
	}
	slices.Sort(v.Instances)
	return v, nil
}

package adminui

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/sluicehq/sluice/service/internal/traffic"
)

// trafficDeps are what the traffic pages read: the instance's counts and,
// where instances share Redis, the fleet's.
type trafficDeps struct {
	rec   *traffic.Recorder
	fleet *traffic.Fleet
}

// The traffic pages list at most callersShown callers in each table, and
// wait at most fleetTimeout for Redis.
const (
	callersShown = 50
	fleetTimeout = 2 * time.Second
)

// hourRow is one rule's counts over the last hour.
type hourRow struct {
	ID, Name     string
	Here, Fleet  traffic.Counts
	HasFleet     bool
	Stored       bool
	HereTotal    int64
	FleetTotal   int64
	ThrottledNow int
}

// fleetData is what the page shows of the fleet.
type fleetData struct {
	Enabled   bool // instances share Redis
	Failed    bool // Redis did not answer: the figures are missing
	Instance  string
	Instances []string
	Hour      traffic.Counts
	Chart     chart
}

// trafficPage shows the instance's traffic, the fleet's, each rule's hour
// and the callers throttled.
func (h *handler) trafficPage(w http.ResponseWriter, r *http.Request, q *req) {
	if h.traffic.rec == nil {
		h.message(w, r, q, http.StatusNotFound, "This instance does not count its traffic")
		return
	}
	now := h.now()
	rec := h.traffic.rec
	in := rec.Instance(now)
	fv, fd := h.readFleet(r.Context(), now, "")
	rows, err := h.hourRows(r, now, fv)
	if err != nil {
		h.failed(w, r, q, "listing the rules", err)
		return
	}
	throttled := rec.ThrottledNow(now, callersShown)
	h.render(w, r, q, http.StatusOK, "traffic", &view{Title: "Traffic", Nav: "traffic", Data: map[string]any{
		"Hour":      in.Hour,
		"Minutes":   newChart("instance-minutes", "This instance, per minute over the last hour", "minute", in.FirstMinute, time.Minute, in.Minutes),
		"Seconds":   newChart("instance-seconds", "This instance, per second over the last minute", "second", in.FirstSecond, time.Second, in.Seconds),
		"Fleet":     fd,
		"Rules":     rows,
		"Throttled": throttled,
		"Most":      rec.MostThrottled(now, callersShown),
		"Now":       fmtTime(now),
	}})
}

// trafficRule shows one rule's traffic.
func (h *handler) trafficRule(w http.ResponseWriter, r *http.Request, q *req) {
	if h.traffic.rec == nil {
		h.message(w, r, q, http.StatusNotFound, "This instance does not count its traffic")
		return
	}
	id := r.PathValue("id")
	now := h.now()
	rec := h.traffic.rec
	v := rec.Rule(id, now)
	_, fd := h.readFleet(r.Context(), now, id)
	var throttled, most []traffic.Caller
	for _, c := range rec.ThrottledNow(now, maxListed) {
		if c.Rule == id && len(throttled) < callersShown {
			throttled = append(throttled, c)
		}
	}
	for _, c := range rec.MostThrottled(now, maxListed) {
		if c.Rule == id && len(most) < callersShown {
			most = append(most, c)
		}
	}
	h.render(w, r, q, http.StatusOK, "traffic", &view{Title: "Traffic of " + id, Nav: "traffic", Data: map[string]any{
		"Rule":      id,
		"Hour":      v.Hour,
		"Minutes":   newChart("rule-minutes", "Rule "+id+" on this instance, per minute over the last hour", "minute", v.FirstMinute, time.Minute, v.Minutes),
		"Seconds":   newChart("rule-seconds", "Rule "+id+" on this instance, per second over the last minute", "second", v.FirstSecond, time.Second, v.Seconds),
		"Fleet":     fd,
		"Throttled": throttled,
		"Most":      most,
		"Now":       fmtTime(now),
	}})
}

// readFleet reads the fleet's counts (all, or rule's when rule is set);
// a Redis failure is logged and shown as missing figures, never as text.
func (h *handler) readFleet(ctx context.Context, now time.Time, rule string) (*traffic.FleetView, fleetData) {
	f := h.traffic.fleet
	if f == nil {
		return nil, fleetData{}
	}
	fd := fleetData{Enabled: true, Instance: f.Instance()}
	ctx, cancel := context.WithTimeout(ctx, fleetTimeout)
	defer cancel()
	fv, err := f.Read(ctx, now)
	if err != nil {
		h.log.ErrorContext(ctx, "adminui: reading the fleet's traffic from Redis", "err", err)
		fd.Failed = true
		return nil, fd
	}
	fd.Instances = fv.Instances
	minutes, hour := fv.Minutes, fv.Hour
	title := "The fleet, per minute over the last hour"
	if rule != "" {
		minutes, hour = fv.Rules[rule], fv.RuleHours[rule]
		if minutes == nil {
			minutes = make([]traffic.Counts, 60)
		}
		title = "Rule " + rule + " on the fleet, per minute over the last hour"
	}
	fd.Hour = hour
	fd.Chart = newChart("fleet-minutes", title, "minute", fv.FirstMinute, time.Minute, minutes)
	return fv, fd
}

// hourRows are the stored rules (the first page of them) and any other
// rule counted in the hour, with their counts here and on the fleet.
func (h *handler) hourRows(r *http.Request, now time.Time, fv *traffic.FleetView) ([]hourRow, error) {
	list, _, err := h.db.List(r.Context(), "", rulesPerPage)
	if err != nil {
		return nil, err
	}
	here := h.traffic.rec.Hours(now)
	throttled := map[string]int{}
	for _, c := range h.traffic.rec.ThrottledNow(now, maxListed) {
		throttled[c.Rule]++
	}
	seen := map[string]bool{}
	var rows []hourRow
	add := func(id, name string, stored bool) {
		if seen[id] {
			return
		}
		seen[id] = true
		row := hourRow{ID: id, Name: name, Stored: stored, Here: here[id], ThrottledNow: throttled[id]}
		if fv != nil {
			row.Fleet, row.HasFleet = fv.RuleHours[id], true
		}
		row.HereTotal, row.FleetTotal = row.Here.Total(), row.Fleet.Total()
		rows = append(rows, row)
	}
	for _, rl := range list {
		add(rl.ID, rl.Name, true)
	}
	var extra []string
	for id := range here {
		extra = append(extra, id)
	}
	if fv != nil {
		for id := range fv.RuleHours {
			extra = append(extra, id)
		}
	}
	slices.Sort(extra)
	for _, id := range extra {
		add(id, "", false)
	}
	return rows, nil
}

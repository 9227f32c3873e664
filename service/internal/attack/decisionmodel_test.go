package attack

import (
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/rules"
)

// The model of TestAttackDecisionModel: one rule set of every kind of rule
// (limits on no endpoint, on patterns, with tiers, shadow, Deny, shadow
// Deny, unlimited, one only reachable by naming it, another dimension, and
// Envoy rules of each kind), two overrides, and the exact fixed-window
// counts every front door must agree with.

// mrule is a rule as the model knows it.
type mrule struct {
	id, dim    string
	domain     string // "" native, "partners" (named only), "edge" (Envoy)
	match      func(endpoint string) bool
	noEndpoint bool // no endpoint patterns: matches every endpoint, "" included
	capacity   int64
	tiers      map[string]int64
	shadow     bool
	deny       bool
	unlimited  bool
	envoyKey   string // an Envoy rule's descriptor key
	envoyValue string // and value ("" any)
}

// The waits of a denial, in order (the binding denial is the longest):
// until the end of a Deny rule's second, of a fixed window's hour, of a
// block (a day away), and never.
const (
	waitNone = iota
	waitDenySecond
	waitWindow
	waitBlock
	waitNever
)

// mres is one rule's result in a decision.
type mres struct {
	rule      string
	shadow    bool
	allowed   bool
	capacity  int64
	remaining int64
	wait      int  // of a denial
	counted   bool // the counter holds something (ResetAfter > 0)
}

// mdec is a decision of the model: allowed, and the results of its rules
// in the engine's order.
type mdec struct {
	allowed bool
	results []mres
	bind    *int // the binding result when set before a change of results (Report's)
}

// answer is what a front door tells: allowed, the binding rule, its
// capacity and what is left.
type answer struct {
	allowed          bool
	rule             string
	limit, remaining int64
}

func (d mdec) answer() answer {
	if len(d.results) == 0 {
		return answer{allowed: d.allowed}
	}
	i := binding(d.results)
	if d.bind != nil {
		i = *d.bind
	}
	b := d.results[i]
	return answer{allowed: d.allowed, rule: b.rule, limit: b.capacity, remaining: b.remaining}
}

// binding is the engine's and core's: a shadow binds only when every
// result is one; among denials the longest wait, among admissions the
// fewest remaining, then the longer reset (a counter that holds something),
// the first on a tie.
func binding(rs []mres) int {
	best := 0
	for i := 1; i < len(rs); i++ {
		a, b := &rs[i], &rs[best]
		if a.shadow != b.shadow {
			if b.shadow {
				best = i
			}
			continue
		}
		switch {
		case a.allowed != b.allowed:
			if !a.allowed {
				best = i
			}
		case !a.allowed:
			if a.wait > b.wait {
				best = i
			}
		case a.remaining != b.remaining:
			if a.remaining < b.remaining {
				best = i
			}
		case a.counted && !b.counted:
			best = i
		}
	}
	return best
}

// mcheck is a native check.
type mcheck struct {
	dim, id, endpoint, rule, key string
	cost                         int64
}

// recordKey names an idempotency record: everything that makes a check the
// same.
type recordKey struct {
	key, dim, id, endpoint, rule string
	cost                         int64
}

// counterKey names a counter: a rule and an identity, on its own state or
// its override's.
type counterKey struct {
	rule, identity string
	override       bool
}

// oneModel holds the counts of the current hour and the idempotency
// records (the free repeats each has had).
type oneModel struct {
	rules   []*mrule
	tiers   map[string]string    // user -> tier
	raised  map[[2]string]int64  // (rule, identity) -> an override's capacity
	blocked map[[2]string]bool   // (rule, identity) blocked
	used    map[counterKey]int64 // this hour
	records map[recordKey]int64  // an admitted original: 1 + the free repeats it had
	names   map[string]*mrule    // by id
	envoy   map[[2]string]*mrule // (key, value) -> Envoy rule; value "" any
}

func prefixOrIs(p string) func(string) bool {
	return func(ep string) bool { return ep == p || strings.HasPrefix(ep, p+"/") }
}

// newOneModel is the model of the rules decisionRules builds, for the
// identities of suffix.
func newOneModel(suffix string) *oneModel {
	always := func(string) bool { return true }
	rs := []*mrule{
		{id: "base", dim: "user", match: always, noEndpoint: true, capacity: 12, tiers: map[string]int64{"gold": 20}},
		{id: "paths", dim: "user", match: func(ep string) bool { return strings.HasPrefix(ep, "/") }, capacity: 15},
		{id: "heavy", dim: "user", match: prefixOrIs("/heavy"), capacity: 5},
		{id: "items", dim: "user", match: func(ep string) bool {
			seg, ok := strings.CutPrefix(ep, "/items/")
			return ok && seg != "" && !strings.Contains(seg, "/")
		}, capacity: 6, shadow: true},
		{id: "banned", dim: "user", match: prefixOrIs("/admin"), deny: true},
		{id: "free", dim: "user", match: func(ep string) bool { return ep == "/free" }, unlimited: true},
		{id: "beta", dim: "user", match: func(ep string) bool { return ep == "/beta" }, deny: true, shadow: true},
		{id: "partner", dim: "user", domain: "partners", match: always, noEndpoint: true, capacity: 4},
		{id: "per-ip", dim: "ip", match: always, noEndpoint: true, capacity: 8},
		{id: "edge.a", domain: "edge", envoyKey: "a", capacity: 6},
		{id: "edge.b", domain: "edge", envoyKey: "b", envoyValue: "x", capacity: 3},
		{id: "edge.ban", domain: "edge", envoyKey: "ban", deny: true},
		{id: "edge.free", domain: "edge", envoyKey: "free", unlimited: true},
		{id: "edge.s", domain: "edge", envoyKey: "s", capacity: 2, shadow: true},
	}
	m := &oneModel{
		rules:   rs,
		tiers:   map[string]string{"goldie-" + suffix: "gold"},
		raised:  map[[2]string]int64{{"base", "vip-" + suffix}: 30},
		blocked: map[[2]string]bool{{"heavy", "jail-" + suffix}: true},
		used:    map[counterKey]int64{},
		records: map[recordKey]int64{},
		names:   map[string]*mrule{},
		envoy:   map[[2]string]*mrule{},
	}
	for _, r := range rs {
		m.names[r.id] = r
		if r.domain == "edge" {
			m.envoy[[2]string{r.envoyKey, r.envoyValue}] = r
		}
	}
	return m
}

// decisionRules is the snapshot of the model's rules (ids as the model's,
// Envoy rules as their file would name them), its tiers and overrides.
func decisionRules(m *oneModel, suffix string, now time.Time) (*rules.Snapshot, error) {
	window := func(n int64) core.Limit { return core.Limit{Algorithm: core.FixedWindow, Rate: n, Period: time.Hour} }
	ban := core.Limit{Algorithm: core.FixedWindow, Period: time.Second}
	var out []*rules.Rule
	for _, r := range m.rules {
		rr := &rules.Rule{ID: r.id, Dimension: r.dim, Domain: r.domain, Shadow: r.shadow, Deny: r.deny, Unlimited: r.unlimited}
		switch {
		case r.deny:
			rr.Limit = ban
		case !r.unlimited:
			rr.Limit = window(r.capacity)
		}
		for tier, n := range r.tiers {
			rr.Tiers = map[string]core.Limit{tier: window(n)}
		}
		switch r.id {
		case "paths":
			rr.Endpoints = []string{"/**"}
		case "heavy":
			rr.Endpoints = []string{"/heavy/**"}
		case "items":
			rr.Endpoints = []string{"/items/:id"}
		case "banned":
			rr.Endpoints = []string{"/admin/**"}
		case "free":
			rr.Endpoints = []string{"/free"}
		case "beta":
			rr.Endpoints = []string{"/beta"}
		}
		if r.domain == "edge" {
			rr.Dimension = ""
			rr.Envoy = &rules.EnvoyNode{Path: []rules.EnvoyLevel{{Key: r.envoyKey, Value: r.envoyValue}}}
		}
		out = append(out, rr)
	}
	until := now.Add(24 * time.Hour)
	return rules.New("decision-model", out, map[string]map[string]string{"user": {"goldie-" + suffix: "gold"}},
		rules.Override{RuleID: "base", Dimension: "user", Identifier: "vip-" + suffix, Limit: window(30), Until: until, Revision: 1},
		rules.Override{RuleID: "heavy", Dimension: "user", Identifier: "jail-" + suffix, Until: until, Revision: 1},
	)
}

// matched returns the rules that apply to c, in file order.
func (m *oneModel) matched(c mcheck) []*mrule {
	if c.rule != "" {
		return []*mrule{m.names[c.rule]}
	}
	var out []*mrule
	for _, r := range m.rules {
		if r.domain != "" || r.dim != c.dim {
			continue
		}
		if r.noEndpoint || c.endpoint != "" && r.match(c.endpoint) {
			out = append(out, r)
		}
	}
	return out
}

// mop is one counter of a decision, with the cost asked of it.
type mop struct {
	rule     *mrule
	identity string
	cost     int64
}

// state is where op's counter stands: its key, capacity and what is left;
// blocked when a block applies (own is then the rule's own capacity).
func (m *oneModel) state(op mop) (k counterKey, capacity, left int64, blocked bool) {
	ri := [2]string{op.rule.id, op.identity}
	capacity = op.rule.capacity
	if n, ok := op.rule.tiers[m.tiers[op.identity]]; ok {
		capacity = n
	}
	k = counterKey{rule: op.rule.id, identity: op.identity}
	if m.blocked[ri] {
		return k, capacity, 0, true
	}
	if n, ok := m.raised[ri]; ok {
		k.override, capacity = true, n
	}
	return k, capacity, capacity - m.used[k], false
}

// group decides ops all or nothing, as the store does; allowed follows
// core's rule (a peek beside takes is an answer, not a vote; peeks alone
// are allowed when each would pass).
func (m *oneModel) group(ops []mop) mdec {
	type st struct {
		k            counterKey
		capacity     int64
		left         int64
		blocked, den bool
	}
	sts := make([]st, len(ops))
	takes, refused := false, false
	for i, op := range ops {
		k, c, left, blocked := m.state(op)
		need := max(op.cost, 1)
		sts[i] = st{k: k, capacity: c, left: left, blocked: blocked, den: blocked || need > left}
		takes = takes || op.cost > 0
	}
	for i, op := range ops {
		if sts[i].den && !op.rule.shadow && (op.cost > 0 || !takes) {
			refused = true
		}
	}
	d := mdec{allowed: !refused}
	for i, op := range ops {
		s := sts[i]
		consumed := takes && !refused && op.cost > 0 && !s.den
		if consumed {
			m.used[s.k] += op.cost
		}
		r := mres{rule: op.rule.id, shadow: op.rule.shadow, allowed: !s.den, capacity: s.capacity, remaining: s.left}
		if consumed {
			r.remaining -= op.cost
		}
		r.counted = m.used[s.k] > 0
		if s.den {
			r.wait = waitFor(s.blocked, max(op.cost, 1), s.capacity, op.rule.capacity)
		}
		if s.blocked {
			r.remaining, r.counted = 0, true
		}
		d.results = append(d.results, r)
	}
	return d
}

// waitFor is the wait class of a denial of cost on a counter of capacity
// (own: the rule's own, or its tier's, which a block hands over to).
func waitFor(blocked bool, cost, capacity, own int64) int {
	switch {
	case blocked && cost > own, !blocked && cost > capacity:
		return waitNever
	case blocked:
		return waitBlock
	}
	return waitWindow
}

// denial is a Deny rule's result.
func denial(r *mrule) mres {
	return mres{rule: r.id, shadow: r.shadow, wait: waitDenySecond}
}

// check decides one native check as Check does, idempotency included.
func (m *oneModel) check(c mcheck) mdec {
	var ops []mop
	var denied []mres
	denies := false
	for _, r := range m.matched(c) {
		switch {
		case r.unlimited:
		case r.deny:
			denied = append(denied, denial(r))
			denies = denies || !r.shadow
		default:
			ops = append(ops, mop{rule: r, identity: c.id, cost: c.cost})
		}
	}
	if denies {
		for i := range ops {
			ops[i].cost = 0
		}
	}
	var d mdec
	switch rk := (recordKey{c.key, c.dim, c.id, c.endpoint, c.rule, c.cost}); {
	case c.key == "" || denies || c.cost == 0 || len(ops) == 0:
		d = m.group(ops)
	case m.records[rk] > 0 && m.records[rk] <= 3: // a free repeat
		m.records[rk]++
		peek := make([]mop, len(ops))
		for i := range ops {
			peek[i] = ops[i]
			peek[i].cost = 0
		}
		d = m.group(peek)
		d.allowed = true
		for i := range d.results {
			d.results[i].allowed = true
		}
	case m.records[rk] > 3: // over the repeat bound: counted as any check
		d = m.group(ops)
	default:
		if d = m.group(ops); d.allowed {
			m.records[rk] = 1
		}
	}
	if len(ops) == 0 {
		d.allowed = true
	}
	d.results = append(d.results, denied...)
	if denies {
		d.allowed = false
	}
	return d
}

// report decides c as Report does: charged, or, when it does not fit,
// every rule drained of what it has left (up to the cost), and the answer
// where the check stands then, denied.
func (m *oneModel) report(c mcheck) mdec {
	d := m.check(c)
	if d.allowed || c.cost == 0 {
		return d
	}
	for _, r := range d.results {
		if !r.shadow && m.names[r.rule].deny {
			return d // a Deny rule's denial takes nothing
		}
	}
	drained := false
	for _, r := range d.results {
		rule := m.names[r.rule]
		if r.shadow || rule.deny {
			continue
		}
		if take := min(c.cost, r.remaining); take > 0 {
			m.group([]mop{{rule: rule, identity: c.id, cost: take}})
			drained = true
		}
	}
	if !drained {
		return d
	}

	now := m.check(mcheck{dim: c.dim, id: c.id, endpoint: c.endpoint, rule: c.rule})
	now.allowed = false
	if len(now.results) > 0 {
		i := binding(now.results)
		now.results[i].allowed, now.bind = false, &i
	}
	return now
}

// batch decides cs all or nothing as CheckBatch does: one group of every
// counter (summed costs), a Deny rule denying all, each check answered
// with its own rules' results in its match order and the batch's Allowed.
func (m *oneModel) batch(cs []mcheck) []mdec {
	var ops []mop
	index := map[[2]string]int{}
	type member struct {
		op     int // -1: a denial
		denial mres
	}
	membs := make([][]member, len(cs))
	denies := false
	for i, c := range cs {
		for _, r := range m.matched(c) {
			switch {
			case r.unlimited:
			case r.deny:
				membs[i] = append(membs[i], member{op: -1, denial: denial(r)})
				denies = denies || !r.shadow
			default:
				k := [2]string{r.id, c.id}
				j, ok := index[k]
				if !ok {
					j = len(ops)
					index[k] = j
					ops = append(ops, mop{rule: r, identity: c.id})
				}
				ops[j].cost += c.cost
				membs[i] = append(membs[i], member{op: j})
			}
		}
	}
	if denies {
		for j := range ops {
			ops[j].cost = 0
		}
	}
	g := m.group(ops)
	allowed := !denies
	for j, op := range ops {
		if op.cost > 0 && !g.results[j].allowed && !op.rule.shadow {
			allowed = false
		}
	}
	out := make([]mdec, len(cs))
	for i := range cs {
		out[i].allowed = allowed
		for _, mb := range membs[i] {
			if mb.op < 0 {
				out[i].results = append(out[i].results, mb.denial)
			} else {
				out[i].results = append(out[i].results, g.results[mb.op])
			}
		}
	}
	return out
}

// usage is where id stands under every native user rule, as Usage tells
// it: capacity and what is left of each counting rule (zero while
// blocked), in rule order; Deny rules are blocked, unlimited ones empty.
type musage struct {
	rule                string
	blocked             bool
	capacity, remaining int64
}

func (m *oneModel) usage(id string) []musage {
	var out []musage
	for _, r := range m.rules {
		if r.dim != "user" {
			continue
		}
		u := musage{rule: r.id}
		switch {
		case r.unlimited:
		case r.deny:
			u.blocked = true
		default:
			_, c, left, blocked := m.state(mop{rule: r, identity: id})
			if blocked {
				u.blocked = true
			} else {
				u.capacity, u.remaining = c, left
			}
		}
		out = append(out, u)
	}
	return out
}

// mdesc is an Envoy descriptor of one entry.
type mdesc struct {
	key, value string
	hits       int64
	negative   bool
}

// mstatus is one descriptor's status: OVER_LIMIT or not, and the limit
// remaining (math.MaxUint32 for an unlimited rule).
type mstatus struct {
	over      bool
	remaining int64
}

// envoyRule returns the Envoy rule d reaches, nil for none.
func (m *oneModel) envoyRule(d mdesc) *mrule {
	if r := m.envoy[[2]string{d.key, d.value}]; r != nil {
		return r
	}
	return m.envoy[[2]string{d.key, ""}]
}

// descKey is the counter an Envoy descriptor of rule r counts.
func descKey(r *mrule, d mdesc) counterKey {
	return counterKey{rule: r.id, identity: "edge|" + d.key + "=" + d.value}
}

// descriptors decides an Envoy request as Descriptors does: the positive
// descriptors all or nothing, summed per counter, each status after the
// hits of its counter up to it when admitted; then the negative ones
// refunded, never below zero.
func (m *oneModel) descriptors(ds []mdesc) (over bool, sts []mstatus) {
	need := map[counterKey]int64{}
	var order []counterKey
	denies := false
	for _, d := range ds {
		r := m.envoyRule(d)
		switch {
		case r == nil, r.unlimited:
		case r.deny:
			denies = denies || !r.shadow
		case !d.negative:
			k := descKey(r, d)
			if _, ok := need[k]; !ok {
				order = append(order, k)
			}
			need[k] += d.hits
		}
	}
	refused := false
	left := map[counterKey]int64{}
	for _, k := range order {
		left[k] = m.names[k.rule].capacity - m.used[k]
		refused = refused || need[k] > left[k] && !m.names[k.rule].shadow
	}
	counted := map[counterKey]bool{}
	for _, k := range order {
		counted[k] = !denies && !refused && need[k] > 0 && need[k] <= left[k]
	}
	over, sts = m.statuses(ds, left, counted)
	for _, k := range order {
		if counted[k] {
			m.used[k] += need[k]
		}
	}
	for i, d := range ds {
		if r := m.envoyRule(d); r != nil && !r.unlimited && !r.deny && d.negative {
			k := descKey(r, d)
			m.used[k] = max(0, m.used[k]-min(d.hits, r.capacity))
			sts[i] = mstatus{remaining: r.capacity - m.used[k]}
		}
	}
	return over || refused, sts
}

// statuses are the statuses of the positive descriptors of ds, whose
// counters had left before the request and were counted or not; over
// when one of them, or a Deny rule, denies.
func (m *oneModel) statuses(ds []mdesc, left map[counterKey]int64, counted map[counterKey]bool) (over bool, sts []mstatus) {
	sts = make([]mstatus, len(ds))
	upto := map[counterKey]int64{}
	for i, d := range ds {
		r := m.envoyRule(d)
		switch {
		case r == nil, d.negative && !r.unlimited && !r.deny:
		case r.unlimited:
			sts[i].remaining = 1<<32 - 1
		case r.deny:
			sts[i].over = !r.shadow
		default:
			k := descKey(r, d)
			upto[k] += d.hits
			switch {
			case counted[k]:
				sts[i].remaining = left[k] - upto[k]
			case upto[k] > left[k]:
				sts[i].over = !r.shadow
			default:
				sts[i].remaining = left[k]
			}
		}
		over = over || sts[i].over
	}
	return over, sts
}

// reset forgets c's own counters under the rules it matches.
func (m *oneModel) reset(c mcheck) {
	for _, r := range m.matched(c) {
		if !r.unlimited && !r.deny {
			delete(m.used, counterKey{rule: r.id, identity: c.id})
		}
	}
}

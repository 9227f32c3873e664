package config

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/internal/route"
	"github.com/sluicehq/sluice/keyfunc"
)

// DefaultMaxBytes is the largest config file read unless WithMaxBytes says
// otherwise: 4 MiB, room for tens of thousands of policies.
const DefaultMaxBytes = 4 << 20

// DefaultMaxPolicies is the most policies a file may hold unless
// WithMaxPolicies says otherwise. Every request walks the policies that
// match it, so a file with millions of them makes each request slow.
const DefaultMaxPolicies = 10_000

// An Option changes how a file is read: its size and policy limits.
type Option func(*options)

type options struct {
	maxBytes    int64
	maxPolicies int
	errs        []error
}

// WithMaxBytes sets the largest file accepted, in bytes (default
// DefaultMaxBytes). A larger file is rejected after reading n+1 bytes, before
// any of it is parsed. n must be at least 1.
func WithMaxBytes(n int64) Option {
	return func(o *options) {
		if n < 1 {
			o.errs = append(o.errs, fmt.Errorf("config: WithMaxBytes: must be at least 1, got %d", n))
			return
		}
		o.maxBytes = n
	}
}

// WithMaxPolicies sets the most policies a file may hold (default
// DefaultMaxPolicies). A file with more is rejected as soon as its policy
// list is counted, before any policy in it is read. n must be at least 1.
func WithMaxPolicies(n int) Option {
	return func(o *options) {
		if n < 1 {
			o.errs = append(o.errs, fmt.Errorf("config: WithMaxPolicies: must be at least 1, got %d", n))
			return
		}
		o.maxPolicies = n
	}
}

func newOptions(opts []Option) (options, error) {
	o := options{maxBytes: DefaultMaxBytes, maxPolicies: DefaultMaxPolicies}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return o, errors.Join(o.errs...)
}

// readFile reads path, failing without reading further once it is larger
// than o.maxBytes.
func (o options) readFile(path string) ([]byte, error) {
	data, err := o.readPrefix(path)
	if err != nil {
		return nil, err
	}
	if err := o.checkSize(path, data); err != nil {
		return nil, err
	}
	return data, nil
}

// readPrefix reads at most o.maxBytes+1 bytes of path: enough to tell that
// it is too large.
func (o options) readPrefix(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, o.maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return data, nil
}

func (o options) checkSize(name string, data []byte) error {
	if int64(len(data)) > o.maxBytes {
		return fmt.Errorf("config: %s: the file is larger than %d bytes (see WithMaxBytes)", name, o.maxBytes)
	}
	return nil
}

// Load reads the policies of a YAML or JSON file (JSON is read as YAML).
// A file larger than DefaultMaxBytes or with more than DefaultMaxPolicies
// policies is an error; opts change both limits.
func Load(path string, opts ...Option) ([]core.Policy, error) {
	f, err := LoadFile(path, opts...)
	if err != nil {
		return nil, err
	}
	return f.Policies, nil
}

// Parse reads policies from data; name is used in error messages. The limits
// of Load apply.
func Parse(name string, data []byte, opts ...Option) ([]core.Policy, error) {
	f, err := ParseFile(name, data, opts...)
	if err != nil {
		return nil, err
	}
	return f.Policies, nil
}

// File is everything a config file holds.
type File struct {
	// Policies are the file's policies, in order.
	Policies []core.Policy
	// Guard holds the options of the file's failure section, for
	// guard.New; it is nil when the file has none.
	Guard []guard.Option
}

// LoadFile reads a whole config file: its policies and its failure section.
// The limits of Load apply.
func LoadFile(path string, opts ...Option) (*File, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	data, err := o.readFile(path)
	if err != nil {
		return nil, err
	}
	return o.parseFile(path, data)
}

// ParseFile is LoadFile on data; name is used in error messages.
func ParseFile(name string, data []byte, opts ...Option) (*File, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	if err := o.checkSize(name, data); err != nil {
		return nil, err
	}
	return o.parseFile(name, data)
}

func (o options) parseFile(name string, data []byte) (*File, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("config: %s: %w", name, err)
	}
	if len(root.Content) == 0 {
		return nil, fmt.Errorf("config: %s: empty file", name)
	}
	p := &parser{file: name, maxPolicies: o.maxPolicies}
	f := p.file_(root.Content[0])
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return f, nil
}

type parser struct {
	file        string
	maxPolicies int
	errs        []error
	ip          []keyfunc.IPOption
	ipBad       bool // client_ip has errors, already reported
}

func (p *parser) fail(n *yaml.Node, field, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("config: %s:%d: %s: %s", p.file, n.Line, field, fmt.Sprintf(format, args...)))
}

// fields returns a mapping's values by key, reporting unknown keys.
func (p *parser) fields(n *yaml.Node, path string, known ...string) map[string]*yaml.Node {
	if n.Kind != yaml.MappingNode {
		p.fail(n, path, "must be a mapping")
		return nil
	}
	m := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i].Value
		if !contains(known, k) {
			p.fail(n.Content[i], path+"."+k, "unknown field (known: %s)", strings.Join(known, ", "))
			continue
		}
		if _, dup := m[k]; dup {
			p.fail(n.Content[i], path+"."+k, "given twice")
		}
		m[k] = n.Content[i+1]
	}
	return m
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func (p *parser) file_(n *yaml.Node) *File {
	f := p.fields(n, "file", "policies", "client_ip", "failure")
	if f == nil {
		return nil
	}
	if ci := f["client_ip"]; ci != nil {
		p.clientIP(ci)
	}
	out := &File{}
	if fn := f["failure"]; fn != nil {
		out.Guard = p.failure(fn)
	}
	out.Policies = p.policies(n, f)
	return out
}

func (p *parser) policies(n *yaml.Node, f map[string]*yaml.Node) []core.Policy {
	list := f["policies"]
	if list == nil || list.Kind != yaml.SequenceNode || len(list.Content) == 0 {
		p.fail(n, "policies", "at least one policy is required")
		return nil
	}
	if len(list.Content) > p.maxPolicies {
		p.fail(list, "policies", "%d policies, more than the limit of %d (see WithMaxPolicies)", len(list.Content), p.maxPolicies)
		return nil
	}
	var ps []core.Policy
	seen := map[string]int{}
	for i, pn := range list.Content {
		path := fmt.Sprintf("policies[%d]", i)
		pol, ok := p.policy(pn, path)
		if !ok {
			continue
		}
		if line, dup := seen[pol.Name]; dup {
			p.fail(pn, path+".name", "duplicate policy name %q (first at line %d)", pol.Name, line)
			continue
		}
		seen[pol.Name] = pn.Line
		ps = append(ps, pol)
	}
	return ps
}

// clientIP reads how the "ip" key finds the client address.
func (p *parser) clientIP(n *yaml.Node) {
	before := len(p.errs)
	f := p.fields(n, "client_ip", "trusted_proxies", "trusted_hops", "header", "ipv6_prefix", "ipv4_prefix")
	for k, v := range f {
		path := "client_ip." + k
		switch k {
		case "trusted_proxies":
			var cidrs []string
			if v.Decode(&cidrs) != nil {
				p.fail(v, path, "must be a list of CIDRs or addresses")
				continue
			}
			bad := false
			for i, c := range cidrs {
				if _, err := netip.ParsePrefix(c); err != nil {
					if _, err2 := netip.ParseAddr(c); err2 != nil {
						p.fail(v.Content[i], fmt.Sprintf("%s[%d]", path, i), "%q is neither a CIDR nor an address", c)
						bad = true
					}
				}
			}
			if bad {
				continue
			}
			// The list on its own: one that trusts every address is
			// reported here, at its line.
			if _, err := keyfunc.NewIPExtractor(keyfunc.TrustProxies(cidrs...)); err != nil {
				p.fail(v, path, "%v", err)
				continue
			}
			p.ip = append(p.ip, keyfunc.TrustProxies(cidrs...))
		case "trusted_hops":
			h, ok := p.whole(v, path, 0)
			if !ok {
				continue
			}
			p.ip = append(p.ip, keyfunc.TrustHops(int(min(h, math.MaxInt32))))
		case "header":
			switch strings.ToLower(v.Value) {
			case "x-forwarded-for":
				p.ip = append(p.ip, keyfunc.FromXForwardedFor())
			case "forwarded":
				p.ip = append(p.ip, keyfunc.FromForwarded())
			default:
				p.ip = append(p.ip, keyfunc.FromClientIPHeader(v.Value))
			}
		case "ipv6_prefix", "ipv4_prefix":
			b, ok := p.whole(v, path, 1)
			if !ok {
				continue
			}
			bits := int(min(b, math.MaxInt32))
			if k == "ipv6_prefix" {
				p.ip = append(p.ip, keyfunc.IPv6Prefix(bits))
			} else {
				p.ip = append(p.ip, keyfunc.IPv4Prefix(bits))
			}
		}
	}
	if len(p.errs) > before {
		p.ipBad = true // the combination, and every "ip" key, would only repeat them
		return
	}
	if _, err := keyfunc.NewIPExtractor(p.ip...); err != nil {
		p.fail(n, "client_ip", "%v", err)
		p.ipBad = true
	}
}

var policyFields = []string{"name", "key", "hash", "algorithm", "rate", "period", "burst", "match", "tiers", "shadow", "refund"}

func (p *parser) policy(n *yaml.Node, path string) (core.Policy, bool) {
	before := len(p.errs)
	f := p.fields(n, path, policyFields...)
	if f == nil {
		return core.Policy{}, false
	}
	var pol core.Policy
	if v := f["name"]; v == nil {
		p.fail(n, path+".name", "required")
	} else if err := core.ValidatePolicyName(v.Value); err != nil {
		p.fail(v, path+".name", "%v", err)
	} else {
		pol.Name = v.Value
	}
	pol.Key = p.key(f["key"], f["hash"], n, path)
	pol.Limit = p.limit(n, f, path)
	if m := f["match"]; m != nil {
		mf := p.fields(m, path+".match", "methods", "routes")
		for k, v := range mf {
			var vals []string
			if v.Decode(&vals) != nil {
				p.fail(v, path+".match."+k, "must be a list of strings")
				continue
			}
			if k == "methods" {
				for i, m := range vals {
					if err := validMethod(m); err != nil {
						p.fail(v.Content[i], fmt.Sprintf("%s.match.methods[%d]", path, i), "%v", err)
					}
				}
				pol.Match.Methods = vals
				continue
			}
			for i, r := range vals {
				if err := route.Validate(r); err != nil {
					p.fail(v.Content[i], fmt.Sprintf("%s.match.routes[%d]", path, i), "%v", err)
				}
			}
			pol.Match.Routes = vals
		}
	}
	if t := f["tiers"]; t != nil {
		if t.Kind != yaml.MappingNode {
			p.fail(t, path+".tiers", "must be a mapping of tier names to limits")
		} else {
			pol.Tiers = map[string]core.Limit{}
			for i := 0; i+1 < len(t.Content); i += 2 {
				tier, tn := t.Content[i].Value, t.Content[i+1]
				tp := path + ".tiers." + tier
				if strings.TrimSpace(tier) == "" {
					p.fail(t.Content[i], fmt.Sprintf("%s.tiers[%q]", path, tier), "a tier needs a name: an empty tier would replace the policy's limit whenever the tier lookup fails")
					continue
				}
				tf := p.fields(tn, tp, "algorithm", "rate", "period", "burst")
				if tf == nil {
					continue
				}
				if tf["rate"] == nil {
					p.fail(tn, tp, "a tier needs a limit: rate is required")
					continue
				}
				pol.Tiers[tier] = p.limit(tn, tf, tp)
			}
		}
	}
	if v := f["shadow"]; v != nil && v.Decode(&pol.Shadow) != nil {
		p.fail(v, path+".shadow", "must be true or false")
	}
	if v := f["refund"]; v != nil {
		switch v.Value {
		case "failed":
			pol.Refund = core.RefundFailed
		case "successful":
			pol.Refund = core.RefundSuccessful
		case "never", "":
		default:
			p.fail(v, path+".refund", "must be failed, successful or never, got %q", v.Value)
		}
	}
	return pol, len(p.errs) == before
}

// limit reads algorithm, rate, period and burst, checking each field where
// it stands.
func (p *parser) limit(n *yaml.Node, f map[string]*yaml.Node, path string) core.Limit {
	l := core.Limit{Algorithm: core.TokenBucket}
	if v := f["algorithm"]; v != nil {
		a, err := core.ParseAlgorithm(v.Value)
		if err != nil {
			p.fail(v, path+".algorithm", "unknown algorithm %q (token_bucket, leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter, gcra)", v.Value)
		}
		l.Algorithm = a
	}
	if v := f["rate"]; v == nil {
		p.fail(n, path+".rate", "required")
	} else if r, ok := p.whole(v, path+".rate", 1); ok {
		l.Rate = r
	}
	if v := f["period"]; v == nil {
		p.fail(n, path+".period", "required (for example 1s, 1m, 1h)")
	} else if d, err := time.ParseDuration(v.Value); err != nil || d <= 0 {
		p.fail(v, path+".period", "must be a positive duration such as 1s, 1m or 1h, got %q", v.Value)
	} else {
		l.Period = d
	}
	if v := f["burst"]; v != nil {
		if b, ok := p.whole(v, path+".burst", 0); ok {
			l.Burst = b
		} else {
			l.Burst = -1 // skip the whole-limit check below
		}
	}
	if l.Rate >= 1 && l.Period > 0 && l.Burst >= 0 {
		if err := l.Validate(); err != nil {
			p.fail(n, path, "%v", err)
		}
	}
	return l
}

// key reads a key spec: "ip", "header:NAME", "query:NAME", "route",
// "method", "const:VALUE", or several joined with "+".
func (p *parser) key(v, hash *yaml.Node, n *yaml.Node, path string) keyfunc.Func {
	if v == nil {
		p.fail(n, path+".key", "required (ip, header:NAME, query:NAME, route, method, const:VALUE, joined with +)")
		return nil
	}
	var parts []keyfunc.Func
	for _, spec := range strings.Split(v.Value, "+") {
		kind, arg, _ := strings.Cut(strings.TrimSpace(spec), ":")
		switch {
		case kind == "ip" && arg == "" && p.ipBad:
			return nil // client_ip's errors are reported
		case kind == "ip" && arg == "":
			e, err := keyfunc.NewIPExtractor(p.ip...)
			if err != nil {
				p.fail(v, path+".key", "%v", err)
				return nil
			}
			parts = append(parts, e.Key)
		case kind == "header" && arg != "":
			parts = append(parts, keyfunc.Header(arg))
		case kind == "query" && arg != "":
			parts = append(parts, keyfunc.Query(arg))
		case kind == "route" && arg == "":
			parts = append(parts, keyfunc.Route())
		case kind == "method" && arg == "":
			parts = append(parts, keyfunc.Method())
		case kind == "const" && arg != "":
			parts = append(parts, keyfunc.Const(arg))
		default:
			p.fail(v, path+".key", "%q is not a key (ip, header:NAME, query:NAME, route, method, const:VALUE)", spec)
			return nil
		}
	}
	f := parts[0]
	if len(parts) > 1 {
		f = keyfunc.Join(parts...)
	}
	if hash != nil {
		var h bool
		if hash.Decode(&h) != nil {
			p.fail(hash, path+".hash", "must be true or false")
		} else if h {
			f = keyfunc.Hash(f)
		}
	}
	return f
}

// failure reads the failure section into guard options.
func (p *parser) failure(n *yaml.Node) []guard.Option {
	f := p.fields(n, "failure", "mode", "instances", "retry_after", "timeout", "breaker", "deny_cache")
	if f == nil {
		return nil
	}
	var opts []guard.Option
	mode := "open"
	if v := f["mode"]; v != nil {
		mode = v.Value
	}
	instances := 0
	if v := f["instances"]; v != nil {
		if mode != "fallback" {
			p.fail(v, "failure.instances", "only with mode: fallback")
		} else if n, ok := p.whole(v, "failure.instances", 1); ok {
			instances = int(min(n, math.MaxInt32))
		}
	}
	retry := time.Duration(0)
	if v := f["retry_after"]; v != nil {
		if mode != "closed" {
			p.fail(v, "failure.retry_after", "only with mode: closed")
		} else {
			retry = p.duration(v, "failure.retry_after")
		}
	}
	switch mode {
	case "open":
		opts = append(opts, guard.WithFailOpen())
	case "closed":
		opts = append(opts, guard.WithFailClosed(retry))
	case "fallback":
		if f["instances"] == nil {
			p.fail(n, "failure.instances", "required with mode: fallback (how many instances share the limits)")
		}
		opts = append(opts, guard.WithFallback(max(instances, 1)))
	default:
		p.fail(f["mode"], "failure.mode", "must be open, closed or fallback, got %q", mode)
	}
	if v := f["timeout"]; v != nil {
		opts = append(opts, guard.WithTimeout(p.duration(v, "failure.timeout")))
	}
	if b := f["breaker"]; b != nil {
		bf := p.fields(b, "failure.breaker", "failures", "cooldown")
		var br guard.Breaker
		if v := bf["failures"]; v != nil {
			if n, ok := p.whole(v, "failure.breaker.failures", 1); ok {
				br.Failures = int(min(n, math.MaxInt32))
			}
		}
		if v := bf["cooldown"]; v != nil {
			br.Cooldown = p.duration(v, "failure.breaker.cooldown")
		}
		opts = append(opts, guard.WithBreaker(br))
	}
	if d := f["deny_cache"]; d != nil {
		df := p.fields(d, "failure.deny_cache", "max_keys", "max_ttl")
		var dc guard.DenyCache
		if v := df["max_keys"]; v == nil {
			p.fail(d, "failure.deny_cache.max_keys", "required")
		} else if n, ok := p.whole(v, "failure.deny_cache.max_keys", 1); ok {
			dc.MaxKeys = int(min(n, math.MaxInt32))
		}
		if v := df["max_ttl"]; v != nil {
			dc.MaxTTL = p.duration(v, "failure.deny_cache.max_ttl")
		}
		opts = append(opts, guard.WithDenyCache(dc))
	}
	return opts
}

// duration reads a positive duration.
func (p *parser) duration(v *yaml.Node, path string) time.Duration {
	d, err := time.ParseDuration(v.Value)
	if err != nil || d <= 0 {
		p.fail(v, path, "must be a positive duration such as 5ms or 1s, got %q", v.Value)
		return 0
	}
	return d
}

// whole reads a whole number >= lo. YAML's decoder truncates a fraction
// ("rate: 1.5" would load as 1) and accepts a quoted or boolean-looking
// value in places; only an integer, or a number with no fractional part
// ("5.0", "1e3" from a JSON generator), is taken here.
func (p *parser) whole(v *yaml.Node, path string, lo int64) (int64, bool) {
	var n int64
	ok := false
	if v.Kind == yaml.ScalarNode {
		switch v.ShortTag() {
		case "!!int":
			ok = v.Decode(&n) == nil
		case "!!float":
			var f float64
			if v.Decode(&f) == nil && f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64 {
				n, ok = int64(f), true
			}
		}
	}
	if !ok || n < lo {
		p.fail(v, path, "must be a whole number >= %d, got %q", lo, v.Value)
		return 0, false
	}
	return n, true
}

// validMethod reports why m cannot be one entry of match.methods:
// core.ValidateMethod's rule (one RFC 9110 token in one case, or "*" for any
// method; ANY, ALL and lists such as "GET,POST" are errors), so a file and
// the Go API accept the same methods.
func validMethod(m string) error { return core.ValidateMethod(m) }

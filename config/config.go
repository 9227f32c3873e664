package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/guard"
	"github.com/sluicehq/sluice/internal/rulefile"
	"github.com/sluicehq/sluice/keyfunc"
)

// DefaultMaxBytes is the largest config file read unless WithMaxBytes says
// otherwise: 4 MiB, room for tens of thousands of policies.
const DefaultMaxBytes = 4 << 20

// DefaultMaxPolicies is the most policies a file may hold unless
// WithMaxPolicies says otherwise. Every request walks the policies that
// match it, so a file with millions of them makes each request slow.
const DefaultMaxPolicies = 10_000

// An Option changes how a file is read: its size and policy limits, and
// where its deprecation notice goes.
type Option func(*options)

type options struct{ rulefile.Options }

// WithMaxBytes sets the largest file accepted, in bytes (default
// DefaultMaxBytes). A larger file is rejected after reading n+1 bytes, before
// any of it is parsed. n must be at least 1.
func WithMaxBytes(n int64) Option {
	return func(o *options) { o.SetMaxBytes("config: WithMaxBytes", n) }
}

// WithMaxPolicies sets the most policies a file may hold (default
// DefaultMaxPolicies). A file with more is rejected as soon as its policy
// list is counted, before any policy in it is read. n must be at least 1.
func WithMaxPolicies(n int) Option {
	return func(o *options) { o.SetMaxItems("config: WithMaxPolicies", n) }
}

// WithLogger sets where the deprecation notice of a file that spells its
// fields by their old names (rate, period, routes; see docs/config.md) is
// logged, once each time the file is read: slog.Default() unless set; nil
// discards it.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.SetLog(l) }
}

func newOptions(opts []Option) (options, error) {
	o := options{rulefile.NewOptions("config:")}
	o.MaxBytes, o.MaxItems = DefaultMaxBytes, DefaultMaxPolicies
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return o, o.Err()
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
	// Deprecated is the file's deprecation notice, also logged (see
	// WithLogger): the old field names it uses (rate, period, routes), each
	// still read with its old meaning, and their names now; "" when it
	// uses none.
	Deprecated string
}

// LoadFile reads a whole config file: its policies and its failure section.
// The limits of Load apply.
func LoadFile(path string, opts ...Option) (*File, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	data, err := o.ReadFile(path)
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
	if err := o.CheckSize(name, data); err != nil {
		return nil, err
	}
	return o.parseFile(name, data)
}

func (o options) parseFile(name string, data []byte) (*File, error) {
	doc, err := o.Decode(name, data)
	if err != nil {
		return nil, err
	}
	p := &parser{Parser: rulefile.NewParser(o.Label, name), maxPolicies: o.MaxItems}
	f := p.file(doc)
	if err := p.Err(); err != nil {
		return nil, err
	}
	f.Deprecated = p.Notice()
	o.Notify(f.Deprecated)
	return f, nil
}

type parser struct {
	*rulefile.Parser
	maxPolicies int
	ip          []keyfunc.IPOption
	ipBad       bool // client_ip has errors, already reported
}

var (
	fileFields   = rulefile.Plain("policies", "client_ip", "failure")
	policyFields = slices.Concat(rulefile.Plain(rulefile.FieldName, "key", "hash"), rulefile.LimitFields(),
		rulefile.Plain("match", rulefile.FieldTiers, rulefile.FieldShadow, "refund", rulefile.FieldLeaseSeconds))
	matchFields = []rulefile.Field{{Name: "methods"}, {Name: rulefile.FieldEndpointPattern, Old: "routes"}}
	policyNoun  = rulefile.Noun{One: "policy", Many: "policies", Option: "WithMaxPolicies"}
)

func (p *parser) file(n *yaml.Node) *File {
	f, ok := p.Fields(n, "", fileFields)
	if !ok {
		return nil
	}
	if ci := f.Get("client_ip"); ci != nil {
		p.clientIP(ci)
	}
	out := &File{}
	if fn := f.Get("failure"); fn != nil {
		out.Guard = p.failure(fn)
	}
	out.Policies = rulefile.Items(p.Parser, f, "policies", policyNoun, p.maxPolicies, p.policy)
	return out
}

// clientIP reads how the "ip" key finds the client address.
func (p *parser) clientIP(n *yaml.Node) {
	before := p.Failures()
	f, _ := p.Fields(n, "client_ip", rulefile.Plain("trusted_proxies", "trusted_hops", "header", "ipv6_prefix", "ipv4_prefix"))
	if v := f.Get("trusted_proxies"); v != nil {
		p.trustedProxies(v, "client_ip.trusted_proxies")
	}
	if v := f.Get("trusted_hops"); v != nil {
		if h, ok := p.Whole(v, "client_ip.trusted_hops", 0); ok {
			p.ip = append(p.ip, keyfunc.TrustHops(int(min(h, math.MaxInt32))))
		}
	}
	if v := f.Get("header"); v != nil {
		switch strings.ToLower(v.Value) {
		case "x-forwarded-for":
			p.ip = append(p.ip, keyfunc.FromXForwardedFor())
		case "forwarded":
			p.ip = append(p.ip, keyfunc.FromForwarded())
		default:
			p.ip = append(p.ip, keyfunc.FromClientIPHeader(v.Value))
		}
	}
	if v := f.Get("ipv6_prefix"); v != nil {
		if b, ok := p.Whole(v, "client_ip.ipv6_prefix", 1); ok {
			p.ip = append(p.ip, keyfunc.IPv6Prefix(int(min(b, math.MaxInt32))))
		}
	}
	if v := f.Get("ipv4_prefix"); v != nil {
		if b, ok := p.Whole(v, "client_ip.ipv4_prefix", 1); ok {
			p.ip = append(p.ip, keyfunc.IPv4Prefix(int(min(b, math.MaxInt32))))
		}
	}
	if p.Failures() > before {
		p.ipBad = true // the combination, and every "ip" key, would only repeat them
		return
	}
	if _, err := keyfunc.NewIPExtractor(p.ip...); err != nil {
		p.Fail(n, "client_ip", "%v", err)
		p.ipBad = true
	}
}

// trustedProxies reads client_ip.trusted_proxies: CIDRs or addresses.
func (p *parser) trustedProxies(v *yaml.Node, path string) {
	var cidrs []string
	if v.Decode(&cidrs) != nil {
		p.Fail(v, path, "must be a list of CIDRs or addresses")
		return
	}
	bad := false
	for i, c := range cidrs {
		if _, err := netip.ParsePrefix(c); err != nil {
			if _, err2 := netip.ParseAddr(c); err2 != nil {
				p.Fail(v.Content[i], fmt.Sprintf("%s[%d]", path, i), "%q is neither a CIDR nor an address", c)
				bad = true
			}
		}
	}
	if bad {
		return
	}
	// The list on its own: one that trusts every address is reported
	// here, at its line.
	if _, err := keyfunc.NewIPExtractor(keyfunc.TrustProxies(cidrs...)); err != nil {
		p.Fail(v, path, "%v", err)
		return
	}
	p.ip = append(p.ip, keyfunc.TrustProxies(cidrs...))
}

// policy reads one policy: the rule fields every file shares (name, the
// limit, tiers, shadow, lease_seconds; the endpoint patterns under match)
// and the library's own (key, hash, match.methods, refund).
func (p *parser) policy(n *yaml.Node, path string) (core.Policy, string, bool) {
	before := p.Failures()
	f, ok := p.Fields(n, path, policyFields)
	if !ok {
		return core.Policy{}, "", false
	}
	var pol core.Policy
	pol.Name, _ = p.Name(f)
	pol.Key = p.key(f)
	pol.Limit, _ = p.Limit(f)
	if m := f.Get("match"); m != nil {
		pol.Match = p.match(m, f.Path("match"))
	}
	if t := f.Get(rulefile.FieldTiers); t != nil {
		pol.Tiers = p.Tiers(t, f.Path(rulefile.FieldTiers))
	}
	if v := f.Get(rulefile.FieldShadow); v != nil {
		pol.Shadow, _ = p.LegacyBool(v, f.Path(rulefile.FieldShadow))
	}
	pol.Lease, _ = p.Lease(f, pol.Limit, pol.Tiers)
	if v := f.Get("refund"); v != nil {
		switch v.Value {
		case "failed":
			pol.Refund = core.RefundFailed
		case "successful":
			pol.Refund = core.RefundSuccessful
		case "never", "":
		default:
			p.Fail(v, f.Path("refund"), "must be failed, successful or never, got %q", v.Value)
		}
	}
	return pol, pol.Name, p.Failures() == before
}

// match reads match: methods, and endpoint_pattern (routes before).
func (p *parser) match(n *yaml.Node, path string) core.Match {
	var m core.Match
	f, ok := p.Fields(n, path, matchFields)
	if !ok {
		return m
	}
	if v := f.Get("methods"); v != nil {
		var vals []string
		if v.Decode(&vals) != nil {
			p.Fail(v, f.Path("methods"), "must be a list of strings")
		} else {
			for i, m := range vals {
				if err := core.ValidateMethod(m); err != nil {
					p.Fail(v.Content[i], fmt.Sprintf("%s[%d]", f.Path("methods"), i), "%v", err)
				}
			}
			m.Methods = vals
		}
	}
	if v := f.Get(rulefile.FieldEndpointPattern); v != nil {
		m.Routes = p.Patterns(v, f.Path(rulefile.FieldEndpointPattern))
	}
	return m
}

// key reads a key spec: "ip", "header:NAME", "query:NAME", "route",
// "method", "const:VALUE", or several joined with "+"; and hash.
func (p *parser) key(f rulefile.Mapping) keyfunc.Func {
	v := f.Get("key")
	if v == nil {
		p.Fail(f.Node, f.Path("key"), "required (ip, header:NAME, query:NAME, route, method, const:VALUE, joined with +)")
		return nil
	}
	var parts []keyfunc.Func
	for _, spec := range strings.Split(v.Value, "+") {
		part, err := p.keyPart(spec)
		if errors.Is(err, errReported) {
			return nil
		}
		if err != nil {
			p.Fail(v, f.Path("key"), "%v", err)
			return nil
		}
		parts = append(parts, part)
	}
	k := parts[0]
	if len(parts) > 1 {
		k = keyfunc.Join(parts...)
	}
	if hash := f.Get("hash"); hash != nil {
		if h, ok := p.LegacyBool(hash, f.Path("hash")); ok && h {
			k = keyfunc.Hash(k)
		}
	}
	return k
}

// errReported is keyPart's error for "ip" when client_ip's errors, already
// reported, leave it without a value.
var errReported = errors.New("reported at client_ip")

// keyPart reads one part of a key spec.
func (p *parser) keyPart(spec string) (keyfunc.Func, error) {
	kind, arg, _ := strings.Cut(strings.TrimSpace(spec), ":")
	switch {
	case kind == "ip" && arg == "":
		if p.ipBad {
			return nil, errReported
		}
		e, err := keyfunc.NewIPExtractor(p.ip...)
		if err != nil {
			return nil, err
		}
		return e.Key, nil
	case kind == "header" && arg != "":
		return keyfunc.Header(arg), nil
	case kind == "query" && arg != "":
		return keyfunc.Query(arg), nil
	case kind == "route" && arg == "":
		return keyfunc.Route(), nil
	case kind == "method" && arg == "":
		return keyfunc.Method(), nil
	case kind == "const" && arg != "":
		return keyfunc.Const(arg), nil
	}
	return nil, fmt.Errorf("%q is not a key (ip, header:NAME, query:NAME, route, method, const:VALUE)", spec)
}

// failure reads the failure section into guard options.
func (p *parser) failure(n *yaml.Node) []guard.Option {
	f, ok := p.Fields(n, "failure", rulefile.Plain("mode", "instances", "retry_after", "timeout", "breaker", "deny_cache"))
	if !ok {
		return nil
	}
	opts := p.failureMode(n, f)
	if v := f.Get("timeout"); v != nil {
		d, _ := p.duration(v, "failure.timeout")
		opts = append(opts, guard.WithTimeout(d))
	}
	if b := f.Get("breaker"); b != nil {
		bf, _ := p.Fields(b, "failure.breaker", rulefile.Plain("failures", "cooldown"))
		var br guard.Breaker
		if v := bf.Get("failures"); v != nil {
			if n, ok := p.Whole(v, "failure.breaker.failures", 1); ok {
				br.Failures = int(min(n, math.MaxInt32))
			}
		}
		if v := bf.Get("cooldown"); v != nil {
			br.Cooldown, _ = p.duration(v, "failure.breaker.cooldown")
		}
		opts = append(opts, guard.WithBreaker(br))
	}
	if d := f.Get("deny_cache"); d != nil {
		df, _ := p.Fields(d, "failure.deny_cache", rulefile.Plain("max_keys", "max_ttl"))
		var dc guard.DenyCache
		if v := df.Get("max_keys"); v == nil {
			p.Fail(d, "failure.deny_cache.max_keys", "required")
		} else if n, ok := p.Whole(v, "failure.deny_cache.max_keys", 1); ok {
			dc.MaxKeys = int(min(n, math.MaxInt32))
		}
		if v := df.Get("max_ttl"); v != nil {
			dc.MaxTTL, _ = p.duration(v, "failure.deny_cache.max_ttl")
		}
		opts = append(opts, guard.WithDenyCache(dc))
	}
	return opts
}

// failureMode reads mode and the settings of one mode (instances,
// retry_after) into the guard's failure option.
func (p *parser) failureMode(n *yaml.Node, f rulefile.Mapping) []guard.Option {
	mode := "open"
	if v := f.Get("mode"); v != nil {
		mode = v.Value
	}
	instances := 0
	if v := f.Get("instances"); v != nil {
		if mode != "fallback" {
			p.Fail(v, "failure.instances", "only with mode: fallback")
		} else if n, ok := p.Whole(v, "failure.instances", 1); ok {
			instances = int(min(n, math.MaxInt32))
		}
	}
	retry := time.Duration(0)
	if v := f.Get("retry_after"); v != nil {
		if mode != "closed" {
			p.Fail(v, "failure.retry_after", "only with mode: closed")
		} else {
			retry, _ = p.duration(v, "failure.retry_after")
		}
	}
	switch mode {
	case "open":
		return []guard.Option{guard.WithFailOpen()}
	case "closed":
		return []guard.Option{guard.WithFailClosed(retry)}
	case "fallback":
		if f.Get("instances") == nil {
			p.Fail(n, "failure.instances", "required with mode: fallback (how many instances share the limits)")
		}
		return []guard.Option{guard.WithFallback(max(instances, 1))}
	}
	p.Fail(f.Get("mode"), "failure.mode", "must be open, closed or fallback, got %q", mode)
	return nil
}

// duration reads a positive duration of the failure section.
func (p *parser) duration(v *yaml.Node, path string) (time.Duration, bool) {
	return p.Duration(v, path, "5ms or 1s")
}

package servicebench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// FetchCPUProfile asks the net/http/pprof handler at addr (host:port) for
// a CPU profile of the next d (whole seconds, at least one) and returns it.
func FetchCPUProfile(ctx context.Context, addr string, d time.Duration) ([]byte, error) {
	secs := max(int(d/time.Second), 1)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("cpu profile: GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(body[:min(len(body), 200)]))
	}
	return body, nil
}

// Category is where a CPU sample is spent, by the code it is spent for.
type Category struct {
	Name string
	// Prefixes of the function names (package paths) the category holds.
	Prefixes []string
}

// Categories, matched from the innermost frame of a sample outwards: the
// first frame in one of them names the sample's category; frames of the Go
// runtime and of the general-purpose standard library (sync, time, strings,
// …) are passed over, so an allocation or a lock counts for the code that
// made it. A sample with no such frame is the runtime's own (the scheduler,
// the garbage collector's workers). Samples growing a goroutine's stack are
// StackGrowthCategory, wherever they happen.
var Categories = []Category{
	{"network syscalls (read, write, epoll)", []string{"syscall.", "internal/poll.", "net.", "internal/runtime/syscall."}},
	{"gRPC and HTTP/2", []string{"google.golang.org/grpc", "golang.org/x/net/http2", "golang.org/x/net/trace", "net/http."}},
	{"protobuf encoding", []string{"google.golang.org/protobuf", "github.com/envoyproxy/go-control-plane", "github.com/envoyproxy/protoc-gen-validate", "github.com/planetscale/vtprotobuf", "github.com/sluicehq/sluice/service/ratelimitv1", "google.golang.org/genproto"}},
	{"front doors (a request to the engine and back)", []string{"github.com/sluicehq/sluice/service/envoyrls", "github.com/sluicehq/sluice/service/grpcapi", "github.com/sluicehq/sluice/service/httpapi", "github.com/sluicehq/sluice/service/remotestore"}},
	{"decision (engine, rules, core, algorithms, store)", []string{"github.com/sluicehq/sluice/"}},
	{"Redis client (go-redis)", []string{"github.com/redis/go-redis"}},
	{"metrics and logs", []string{"github.com/prometheus/", "log/slog", "log."}},
	{MainCategory, []string{"main."}},
}

// MainCategory holds a server's main package: ratelimitd's wiring and
// observers, the floor's constant handlers.
const MainCategory = "main package (ratelimitd's wiring and observers; the floor's handlers)"

// RuntimeCategory is the category of samples in no Category.
const RuntimeCategory = "Go runtime (scheduler, garbage collector)"

// OtherCategory holds samples whose innermost non-runtime frame is in no
// Category.
const OtherCategory = "other"

// passedOver reports whether fn is runtime or general-purpose standard
// library code, whose time counts for its caller.
func passedOver(fn string) bool {
	pkg := pkgOf(fn)
	if first, _, _ := strings.Cut(pkg, "/"); strings.Contains(first, ".") {
		return false // a module: github.com/…, google.golang.org/…
	}
	switch pkg {
	case "main", "syscall", "net", "internal/poll", "internal/runtime/syscall", "net/http", "log", "log/slog":
		return false
	}
	return true // runtime, internal/…, sync, time, strings, strconv, bytes, fmt, sort, context, encoding/…, …
}

// pkgOf returns the package path of a function name as profiles write it
// ("google.golang.org/grpc.(*Server).handleStream.func1", "runtime.mallocgc",
// "slices.SortFunc[...]").
func pkgOf(fn string) string {
	if i := strings.IndexByte(fn, '['); i >= 0 {
		fn = fn[:i]
	}
	slash := strings.LastIndexByte(fn, '/')
	if dot := strings.IndexByte(fn[slash+1:], '.'); dot >= 0 {
		return fn[:slash+1+dot]
	}
	return fn
}

// Share is one category's part of a profile.
type Share struct {
	Category string
	CPU      time.Duration
	Fraction float64 // of the profile's total
}

// Breakdown is where a CPU profile's time went.
type Breakdown struct {
	// Total is the CPU time the profile sampled.
	Total time.Duration
	// Duration is the wall time it covered.
	Duration time.Duration
	// Shares by category, largest first.
	Shares []Share
	// Top are the functions with the most CPU time of their own (flat),
	// largest first, at most ten.
	Top []Share
}

// Share returns the fraction of category name, 0 if absent.
func (b Breakdown) Share(name string) float64 {
	for _, s := range b.Shares {
		if s.Category == name {
			return s.Fraction
		}
	}
	return 0
}

// Analyze parses a CPU profile (pprof's gzipped protobuf) and breaks its
// time down by Categories.
func Analyze(data []byte) (Breakdown, error) {
	p, err := profile.ParseData(data)
	if err != nil {
		return Breakdown{}, fmt.Errorf("cpu profile: %w", err)
	}
	vi := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			vi = i
		}
	}
	if vi < 0 {
		return Breakdown{}, fmt.Errorf("cpu profile: no cpu/nanoseconds sample type in %v", p.SampleType)
	}
	byCat := map[string]int64{}
	flat := map[string]int64{}
	var total int64
	for _, s := range p.Sample {
		v := s.Value[vi]
		total += v
		frames := frames(s)
		if len(frames) > 0 {
			flat[frames[0]] += v
		}
		byCat[categorize(frames)] += v
	}
	b := Breakdown{Total: time.Duration(total), Duration: time.Duration(p.DurationNanos)}
	b.Shares = shares(byCat, total, 0)
	b.Top = shares(flat, total, 10)
	return b, nil
}

// frames returns the function names of a sample, innermost first (inlined
// frames included, innermost first within a location).
func frames(s *profile.Sample) []string {
	var out []string
	for _, loc := range s.Location {
		for _, l := range loc.Line {
			if l.Function != nil {
				out = append(out, l.Function.Name)
			}
		}
	}
	return out
}

// StackGrowthCategory holds the samples spent growing a goroutine's stack
// (runtime.newstack copying it to a larger one): a server that starts a
// goroutine per request pays it on every request whose stack outgrows the
// initial size, in whatever function crossed the boundary.
const StackGrowthCategory = "goroutine stack growth (runtime.newstack)"

// categorize returns the category of a stack, innermost frame first.
func categorize(frames []string) string {
	if slices.Contains(frames, "runtime.newstack") {
		return StackGrowthCategory
	}
	for _, fn := range frames {
		if passedOver(fn) {
			continue
		}
		for _, c := range Categories {
			for _, p := range c.Prefixes {
				if strings.HasPrefix(fn, p) {
					return c.Name
				}
			}
		}
		return OtherCategory
	}
	return RuntimeCategory
}

func shares(m map[string]int64, total int64, limit int) []Share {
	out := make([]Share, 0, len(m))
	for k, v := range m {
		f := 0.0
		if total > 0 {
			f = float64(v) / float64(total)
		}
		out = append(out, Share{Category: k, CPU: time.Duration(v), Fraction: f})
	}
	slices.SortFunc(out, func(a, b Share) int {
		if a.CPU != b.CPU {
			return int(b.CPU - a.CPU)
		}
		return strings.Compare(a.Category, b.Category)
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

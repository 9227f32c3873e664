package rules

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed" // the bundled example rules
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/rulefile"
)

// Source is where rules come from: a file (File, Bytes) or a database
// (package rulesdb).
type Source interface {
	// Load returns the current snapshot, validated as a whole, or an error
	// naming file:line:field.
	Load(ctx context.Context) (*Snapshot, error)
	// Watch calls apply with every new valid snapshot until ctx ends, then
	// returns nil; an invalid change is reported to onError and the last
	// good snapshot stays in force. apply puts the snapshot in force and
	// returns nil, or returns why it could not (the snapshot is then
	// refused as an invalid change is: it is not offered again until the
	// rules change). apply and onError are called from Watch's goroutine,
	// one at a time.
	Watch(ctx context.Context, apply func(*Snapshot) error, onError func(error)) error
}

// File is a Source reading a rules file, or a directory of rules files,
// from disk. It is safe for concurrent use.
type File struct {
	path string
	o    options

	mu   sync.Mutex
	last [sha256.Size]byte // content hash of the last snapshot Load or Watch returned
	seen bool
}

// NewFile returns the Source of the rules at path: one file in our format
// or Envoy's (told apart by its content), or a directory whose *.yaml and
// *.yml files are read as one rule set (envoyproxy/ratelimit's layout: one
// domain per file; a domain in two files is an error). Options that are
// invalid are reported by Load.
func NewFile(path string, opts ...Option) *File {
	return &File{path: path, o: newOptions(opts)}
}

// Load reads and validates the rules.
func (f *File) Load(ctx context.Context) (*Snapshot, error) {
	if err := f.o.Err(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, sum, err := f.load()
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.last, f.seen = sum, true
	f.mu.Unlock()
	return s, nil
}

// Watch reads the rules every poll interval (default 1s), following
// symbolic links anew each time (so a swapped link is seen), and calls apply
// when their content changed and is valid. An invalid or unreadable (for
// example deleted) file is reported to onError once per distinct content or
// error, and the last good snapshot stays in force (a file caught
// half-written is reported too, and the next poll applies it complete:
// replace files by renaming to avoid the report). Content restored to the
// rules in force after such a report is applied again (nothing changes but
// the caller hears the source is good again). Watch returns nil when ctx
// ends.
func (f *File) Watch(ctx context.Context, apply func(*Snapshot) error, onError func(error)) error {
	if err := f.o.Err(); err != nil {
		return err
	}
	t := time.NewTicker(f.o.poll)
	defer t.Stop()
	var lastBad [sha256.Size]byte
	lastErr := ""
	reported := false // onError was called since the last apply
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		data, sum, err := f.read()
		if err != nil {
			if err.Error() != lastErr {
				lastErr = err.Error()
				lastBad = [sha256.Size]byte{}
				reported = true
				onError(err)
			}
			continue
		}
		lastErr = ""
		f.mu.Lock()
		same := f.seen && sum == f.last
		f.mu.Unlock()
		if same && !reported || sum == lastBad {
			continue
		}
		s, err := f.parse(data, sum)
		if err != nil {
			lastBad = sum
			reported = true
			onError(err)
			continue
		}
		f.mu.Lock()
		f.last, f.seen = sum, true
		f.mu.Unlock()
		lastBad, reported = [sha256.Size]byte{}, false
		_ = apply(s) // refused: the caller says why; offered again only once the content changes
	}
}

// content is what a path holds: one file, or a directory's files by name.
type content struct {
	files []namedData
}

type namedData struct {
	name string
	data []byte
}

func (f *File) load() (*Snapshot, [sha256.Size]byte, error) {
	c, sum, err := f.read()
	if err != nil {
		return nil, sum, err
	}
	s, err := f.parse(c, sum)
	return s, sum, err
}

// read reads the file or directory and hashes its content.
func (f *File) read() (content, [sha256.Size]byte, error) {
	var c content
	st, err := os.Stat(f.path)
	if err != nil {
		return c, [sha256.Size]byte{}, f.o.FileError(f.path, err)
	}
	if !st.IsDir() {
		data, err := f.o.ReadFile(f.path)
		if err != nil {
			return c, [sha256.Size]byte{}, err
		}
		c.files = []namedData{{f.path, data}}
		return c, sha256.Sum256(data), nil
	}
	entries, err := os.ReadDir(f.path)
	if err != nil {
		return c, [sha256.Size]byte{}, rulefile.PathError(dirLabel, f.path, err)
	}
	h := sha256.New()
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || strings.HasPrefix(n, ".") || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			continue
		}
		p := filepath.Join(f.path, n)
		data, err := f.o.ReadFile(p)
		if err != nil {
			return c, [sha256.Size]byte{}, err
		}
		c.files = append(c.files, namedData{p, data})
		fmt.Fprintf(h, "%d:%s%d:", len(n), n, len(data))
		h.Write(data)
	}
	if len(c.files) == 0 {
		return c, [sha256.Size]byte{}, fmt.Errorf("%s %s: no *.yaml or *.yml file in it", dirLabel, f.path)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return c, sum, nil
}

// dirLabel begins the errors about a directory of rules files as a whole.
const dirLabel = "rules directory"

// parse validates content as one rule set.
func (f *File) parse(c content, sum [sha256.Size]byte) (*Snapshot, error) {
	rev := hex.EncodeToString(sum[:6])
	if len(c.files) == 1 {
		p, err := f.o.parseFile(c.files[0].name, c.files[0].data)
		if err != nil {
			return nil, err
		}
		return f.o.build(p, rev)
	}
	all := &parsed{domains: map[string]string{}}
	var errs []error
	for _, nd := range c.files {
		p, err := f.o.parseFile(nd.name, nd.data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for d, file := range p.domains {
			if prev, dup := all.domains[d]; dup {
				errs = append(errs, rulefile.Errorf(label, file, 1, "domain", "duplicate domain %q (also in %s)", d, prev))
				continue
			}
			all.domains[d] = file
		}
		all.rules = append(all.rules, p.rules...)
		all.notices = append(all.notices, p.notices...)
		if len(p.tiers) > 0 {
			if all.tiers != nil {
				errs = append(errs, rulefile.Errorf(label, nd.name, 1, "tier_assignments", "only one file of a directory may assign tiers"))
				continue
			}
			all.tiers, all.tierLines = p.tiers, p.tierLines
		}
	}
	if len(all.rules) > f.o.MaxItems {
		errs = append(errs, fmt.Errorf("%s %s: %d rules, more than the limit of %d (see WithMaxRules)", dirLabel, f.path, len(all.rules), f.o.MaxItems))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return f.o.build(all, rev)
}

// Bytes is a Source of fixed content: the bundled example, or rules given
// inline. Watch never reports a change.
type Bytes struct {
	name string
	data []byte
	o    options
}

// NewBytes returns the Source of the rules in data (our format or
// Envoy's); name is used in errors and Positions. data is copied.
func NewBytes(name string, data []byte, opts ...Option) *Bytes {
	return &Bytes{name: name, data: bytes.Clone(data), o: newOptions(opts)}
}

// Load parses and validates the content.
func (b *Bytes) Load(ctx context.Context) (*Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return b.o.parse(b.name, b.data)
}

// Watch waits for ctx to end: fixed content never changes.
func (b *Bytes) Watch(ctx context.Context, _ func(*Snapshot) error, _ func(error)) error {
	<-ctx.Done()
	return nil
}

//go:embed example.yaml
var example []byte

// Example returns the bundled example rules file (ours, example.yaml): the
// rules ratelimitd serves when started without --rules. A demo sees a
// check allowed, then warned, then denied within a dozen requests. It
// returns a fresh copy on each call.
func Example() []byte { return bytes.Clone(example) }

package config

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
)

// Watcher keeps a Limiter's policies in step with a file. Close stops it.
type Watcher struct {
	path     string
	limiter  *core.Limiter
	every    time.Duration
	onReload func(error)
	file     []Option
	last     [32]byte
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
}

// WatchOption configures a Watcher.
type WatchOption func(*Watcher)

// Every sets how often the file is checked for changes (default 1s).
func Every(d time.Duration) WatchOption { return func(w *Watcher) { w.every = d } }

// OnReload is called after each reload attempt: nil when the new policies
// are in force, the reason otherwise (the old ones then stay). The default
// logs failures with slog.
func OnReload(f func(error)) WatchOption { return func(w *Watcher) { w.onReload = f } }

// WithFileOptions applies opts (WithMaxBytes, WithMaxPolicies) to every load
// of the watched file.
func WithFileOptions(opts ...Option) WatchOption {
	return func(w *Watcher) { w.file = append(w.file, opts...) }
}

// Watch loads path into l now (an error here is returned and nothing
// changes), then reloads it whenever its content changes, until Close. A
// reload swaps the policies at once: no request is dropped or blocked, and
// an invalid file leaves the last good policies in force.
func Watch(path string, l *core.Limiter, opts ...WatchOption) (*Watcher, error) {
	w := &Watcher{path: path, limiter: l, every: time.Second, stop: make(chan struct{}), done: make(chan struct{})}
	w.onReload = func(err error) {
		if err != nil {
			slog.Warn("sluice: config reload failed; keeping the previous policies", "file", path, "error", err)
		}
	}
	for _, o := range opts {
		o(w)
	}
	if w.every <= 0 {
		return nil, errors.New("config: Every: must be positive")
	}
	if _, err := w.reload(); err != nil {
		return nil, err
	}
	go w.loop()
	return w, nil
}

func (w *Watcher) loop() {
	defer close(w.done)
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			if changed, err := w.reload(); changed || err != nil {
				w.onReload(err)
			}
		}
	}
}

// reload loads the file if its content changed since the last good load.
func (w *Watcher) reload() (changed bool, err error) {
	o, err := newOptions(w.file)
	if err != nil {
		return false, err
	}
	data, err := o.ReadPrefix(w.path)
	if err != nil {
		return false, err
	}
	sum := sha256.Sum256(data)
	if bytes.Equal(sum[:], w.last[:]) {
		return false, nil
	}
	var ps []core.Policy
	err = o.CheckSize(w.path, data)
	if err == nil {
		var f *File
		if f, err = o.parseFile(w.path, data); err == nil {
			ps = f.Policies
		}
	}
	if err == nil {
		err = w.limiter.SetPolicies(ps)
	}
	if err != nil {
		w.last = sum // report a bad file once, not at every tick
		return true, err
	}
	w.last = sum
	return true, nil
}

// Close stops watching. It is safe to call more than once.
func (w *Watcher) Close() error {
	w.once.Do(func() { close(w.stop) })
	<-w.done
	return nil
}

// LoadInto loads path, with the limits of Load, and sets it as l's policies.
func LoadInto(_ context.Context, path string, l *core.Limiter, opts ...Option) error {
	ps, err := Load(path, opts...)
	if err != nil {
		return err
	}
	return l.SetPolicies(ps)
}

package main

import (
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/adminui"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// The admin page's list of warned and throttled callers: those of the last
// recentWindow, at most recentMax (the oldest dropped first).
const (
	recentWindow = 5 * time.Minute
	recentMax    = 10_000
)

// adminPage serves /admin/ (adminui) over the database of --db. An
// instance started from its rules cache while the database is down has no
// database yet: the page is built when it is reached and answers 503 until
// then.
type adminPage struct {
	src    *rulesdb.Source
	build  func(*rulesdb.DB) (http.Handler, error)
	log    *slog.Logger
	mu     sync.Mutex
	h      http.Handler
	failed bool
}

func newAdminPage(src *rulesdb.Source, store core.Store, e *engine.Engine, recent *engine.Recent, log *slog.Logger) *adminPage {
	return &adminPage{src: src, log: log, build: func(d *rulesdb.DB) (http.Handler, error) {
		auth, err := adminauth.New(d, store, adminauth.Options{Logger: log})
		if err != nil {
			return nil, err
		}
		return adminui.New(adminui.Options{DB: d, Engine: e, Auth: auth, Recent: recent, Logger: log})
	}}
}

func (p *adminPage) handler() http.Handler {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.h == nil && !p.failed {
		if d := p.src.DB(); d != nil {
			h, err := p.build(d)
			if err != nil {
				p.failed = true
				p.log.Error("admin page: not served", "error", err)
				return nil
			}
			p.h = h
		}
	}
	return p.h
}

func (p *adminPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := p.handler()
	if h == nil {
		w.Header().Set("Cache-Control", "no-store")
		http.Error(w, "the admin page needs the rules database, which has not been reached yet", http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}

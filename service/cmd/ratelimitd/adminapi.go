package main

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/service/adminapi"
	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// adminAPI serves the admin REST API (adminapi behind adminauth) over the
// database of --db. An instance started from its rules cache while the
// database is down has no database yet: the API is built when it is
// reached and answers 503 (problem+json) until then.
type adminAPI struct {
	src   *rulesdb.Source
	build func(*rulesdb.DB) (http.Handler, error)
	log   *slog.Logger

	mu     sync.Mutex
	h      http.Handler
	failed bool
}

func newAdminAPI(src *rulesdb.Source, store core.Store, e *engine.Engine, log *slog.Logger) *adminAPI {
	return &adminAPI{src: src, log: log, build: func(d *rulesdb.DB) (http.Handler, error) {
		auth, err := adminauth.New(d, store, adminauth.Options{Logger: log})
		if err != nil {
			return nil, err
		}
		return adminapi.New(adminapi.Options{DB: d, Engine: e, Auth: auth, Logger: log})
	}}
}

// mount registers the API's paths through handle.
func (a *adminAPI) mount(handle func(pattern, route string, h http.Handler)) {
	for _, p := range adminapi.Paths {
		handle(p, p, a)
	}
}

func (a *adminAPI) handler() http.Handler {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.h == nil && !a.failed {
		if d := a.src.DB(); d != nil {
			h, err := a.build(d)
			if err != nil {
				a.failed = true
				a.log.Error("admin API: not served", "error", err)
				return nil
			}
			a.h = h
		}
	}
	return a.h
}

func (a *adminAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := a.handler()
	if h == nil {
		b, _ := json.Marshal(adminapi.Problem{Type: "about:blank", Title: http.StatusText(http.StatusServiceUnavailable),
			Status: http.StatusServiceUnavailable, Detail: "the admin API needs the rules database, which has not been reached yet",
			Instance: r.URL.Path})
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Retry-After", "5")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write(append(b, '\n'))
		return
	}
	h.ServeHTTP(w, r)
}

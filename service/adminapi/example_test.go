package adminapi_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/adminapi"
	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// Example creates a rule through the admin API, is refused a change made
// without the rule's ETag, makes it with the ETag, and shows a refusal
// naming its field.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "adminapi-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()
	db, err := rulesdb.Open(ctx, "file:"+filepath.Join(dir, "rules.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = db.Close() }()
	token, _, err := db.CreateToken(ctx, "cli:ops", "deploy-bot", rulesdb.ScopeWrite)
	if err != nil {
		fmt.Println(err)
		return
	}
	store, err := memorystore.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = store.Close() }()
	quiet := slog.New(slog.DiscardHandler)
	eng, err := engine.New(ctx, store, db.Source(0), engine.WithLogger(quiet))
	if err != nil {
		fmt.Println(err)
		return
	}
	auth, err := adminauth.New(db, store, adminauth.Options{Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	api, err := adminapi.New(adminapi.Options{DB: db, Engine: eng, Auth: auth, Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}

	send := func(method, path, body string, hdr ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+token)
		r.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		return w
	}
	rule := `{"id":"orders","dimension":"user","endpoint_pattern":"/api/orders/**","limit":%d,"window_seconds":60,"algorithm":"token_bucket"}`

	w := send("POST", "/api/v1/rules", fmt.Sprintf(rule, 100))
	fmt.Println(w.Code, w.Header().Get("Location"), w.Header().Get("ETag"))
	etag := w.Header().Get("ETag")

	w = send("PUT", "/api/v1/rules/orders", fmt.Sprintf(rule, 200))
	fmt.Println(w.Code, w.Header().Get("Content-Type"))

	w = send("PUT", "/api/v1/rules/orders", fmt.Sprintf(rule, 200), "If-Match", etag)
	fmt.Println(w.Code, w.Header().Get("ETag"))

	w = send("GET", "/api/v1/rules/orders", "", "If-None-Match", w.Header().Get("ETag"))
	fmt.Println(w.Code)

	w = send("POST", "/api/v1/rules", `{"id":"search","dimension":"user","limit":10,"window_seconds":0,"algorithm":"gcra"}`)
	fmt.Print(w.Code, " ", w.Body.String())

	log, _, err := db.AuditQuery(ctx, rulesdb.AuditFilter{Target: "rule/"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range log {
		fmt.Println(e.Revision, e.Actor, e.Action, e.Target)
	}
	// Output:
	// 201 /api/v1/rules/orders "2"
	// 428 application/problem+json
	// 200 "3"
	// 304
	// 400 {"type":"about:blank","title":"Bad Request","status":400,"detail":"window_seconds: must be 1 to 3153600000 (100 years), got 0","instance":"/api/v1/rules","errors":[{"field":"window_seconds","message":"must be 1 to 3153600000 (100 years), got 0"}]}
	// 2 deploy-bot rule.create rule/orders
	// 3 deploy-bot rule.update rule/orders
}

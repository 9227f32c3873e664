package adminui_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/adminui"
	"github.com/sluicehq/sluice/service/engine"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// Example mounts the admin page over a rules database and signs in with a
// token, as a browser would.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "adminui-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()
	db, err := rulesdb.Open(ctx, filepath.Join(dir, "rules.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = db.Close() }()
	if _, err := db.Create(ctx, "setup", rulesdb.Rule{ID: "orders", Name: "Orders", Dimension: "user", EndpointPattern: "/api/orders/**",
		Limit: 100, WindowSeconds: 60, Algorithm: "token_bucket", Enabled: true}); err != nil {
		fmt.Println(err)
		return
	}
	secret, _, err := db.CreateToken(ctx, "setup", "ops", rulesdb.ScopeWrite)
	if err != nil {
		fmt.Println(err)
		return
	}

	store, err := memorystore.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	recent := engine.NewRecent(5*time.Minute, 1000)
	eng, err := engine.New(ctx, store, db.Source(0), engine.WithObserver(recent), engine.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	auth, err := adminauth.New(db, store, adminauth.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	page, err := adminui.New(adminui.Options{DB: db, Engine: eng, Auth: auth, Recent: recent})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/", page)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	resp, err := browser.PostForm(srv.URL+"/admin/login", url.Values{"token": {secret}})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = resp.Body.Close()
	fmt.Println(resp.Request.URL.Path, resp.StatusCode, resp.Header.Get("X-Frame-Options"))
	// Output:
	// /admin/ 200 DENY
}

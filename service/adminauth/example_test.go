package adminauth_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/service/adminauth"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// A handler behind Wrap: a request needs a token of the right scope, and
// is counted against the token's limit.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "adminauth-example-")
	defer os.RemoveAll(dir)
	db, err := rulesdb.Open(ctx, "file:"+filepath.Join(dir, "rules.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	secret, _, _ := db.CreateToken(ctx, "cli:ops", "dashboard", rulesdb.ScopeRead)
	store, _ := memorystore.New()
	auth, _ := adminauth.New(db, store, adminauth.Options{})
	h := auth.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := adminauth.PrincipalFrom(r.Context())
		fmt.Fprintf(w, "hello %s", p.Name)
	}))

	for _, req := range []struct{ method, auth string }{
		{"GET", ""},
		{"GET", "Bearer " + secret},
		{"POST", "Bearer " + secret},
	} {
		r := httptest.NewRequest(req.method, "/api/v1/rules", nil)
		if req.auth != "" {
			r.Header.Set("Authorization", req.auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(strings.TrimSpace(fmt.Sprintln(req.method, w.Code, w.Header().Get("RateLimit-Policy"))))
	}
	// Output:
	// GET 401
	// GET 200 "admin_read";q=1000;w=60
	// POST 403
}

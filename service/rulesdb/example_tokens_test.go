package rulesdb_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sluicehq/sluice/service/rulesdb"
)

// An admin token: created (its secret shown once, only its hash stored),
// authenticated, revoked.
func ExampleDB_CreateToken() {
	dir, err := os.MkdirTemp("", "rulesdb-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()
	ctx := context.Background()
	db, err := rulesdb.Open(ctx, filepath.Join(dir, "rules.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = db.Close() }()

	secret, _, err := db.CreateToken(ctx, "cli:ops", "ci-deploy", rulesdb.ScopeWrite)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.HasPrefix(secret, rulesdb.TokenPrefix), len(secret))
	t, err := db.Authenticate(ctx, secret)
	fmt.Println(t.Name, t.Scope, err)
	_ = db.RevokeToken(rulesdb.WithRequestID(ctx, "req-7"), "cli:ops", "ci-deploy")
	_, err = db.Authenticate(ctx, secret)
	fmt.Println(errors.Is(err, rulesdb.ErrUnauthorized))
	es, _ := db.Audit(ctx, 0, 10)
	for _, e := range es {
		fmt.Printf("%s %s %s request_id=%q\n", e.Actor, e.Action, e.Target, e.RequestID)
	}
	// Output:
	// true 47
	// ci-deploy write <nil>
	// true
	// cli:ops token.create token/ci-deploy request_id=""
	// cli:ops token.revoke token/ci-deploy request_id="req-7"
}

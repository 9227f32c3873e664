package redisbench_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
)

// gcra is a Decider of one's own: sluice's Redis store with a GCRA limit.
type gcra struct{ store *redisstore.Store }

func (g gcra) Decide(ctx context.Context, key string) (bool, error) {
	ops := []core.Op{{Key: core.Key{Identity: key}, Limit: core.PerSecond(redisbench.Rate).WithAlgorithm(core.GCRA), Cost: 1}}
	out := make([]core.Result, 1)
	err := g.store.Take(ctx, ops, out)
	return out[0].Allowed, err
}

// A closed-loop load of 64 callers for one second against a redis-server
// the program starts itself (it needs redis-server on PATH, or its path in
// $REDIS_SERVER).
func ExampleLoad() {
	bin, err := redisbench.FindBinary(redisbench.ServerEnv, "redis-server")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := redisbench.StartServer(bin)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	client := redisbench.NewClient(srv.Addr, redisbench.Callers)
	defer client.Close()
	store, err := redisstore.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	keys := make([]string, redisbench.Identities)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%d", i)
	}
	res := redisbench.Load(context.Background(), gcra{store}, redisbench.LoadConfig{
		Callers: redisbench.Callers, Keys: keys, Duration: time.Second,
	})
	fmt.Printf("%.0f decisions/s, %d denied, %d errors\n", res.PerSecond(), res.Denied, res.Errors)
}

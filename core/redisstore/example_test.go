package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/redisstore"
)

// A store shared by every instance of a service. With a Cluster, pass a
// redis.ClusterClient; with Sentinel, redis.NewFailoverClient.
func Example() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.WithPrefix("myapp"), redisstore.WithTimeout(20*time.Millisecond))
	if err != nil {
		panic(err)
	}
	ops := []core.Op{{Key: core.Key{Identity: "user:42", Policy: "api"}, Limit: core.PerMinute(100), Cost: 1}}
	out := make([]core.Result, 1)
	if err := store.Take(context.Background(), ops, out); err != nil {
		// Redis is down or slow: fail open, fail closed, or fall back.
		return
	}
	fmt.Println(out[0].Allowed, out[0].Remaining)
}

// The Redis key that holds a key's state: every policy and algorithm of one
// identity shares its Cluster slot.
func ExampleStore_Key() {
	store, _ := redisstore.New(redis.NewClient(&redis.Options{}))
	fmt.Println(store.Key(core.Key{Identity: "ip:203.0.113.7", Policy: "per-ip"}, core.GCRA))
	fmt.Println(store.Key(core.Key{Identity: "user:{weird}", Policy: "api"}, core.FixedWindow))
	fmt.Println(store.Key(core.Key{Identity: "ip:203.0.113.7"}, core.GCRA))
	// Output:
	// sluice:{ip:203.0.113.7}:per-ip:gc
	// sluice:{user:%7Bweird%7D}:api:fw
	// sluice:{ip:203.0.113.7}:gc
}

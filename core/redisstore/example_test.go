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
	r, err := store.Take(context.Background(), "user:42", core.PerMinute(100), 1)
	if err != nil {
		// Redis is down or slow: fail open, fail closed, or fall back.
		return
	}
	fmt.Println(r.Allowed, r.Remaining)
}

// The Redis key that holds an identity's state: every algorithm of one
// identity shares its Cluster slot.
func ExampleStore_Key() {
	store, _ := redisstore.New(redis.NewClient(&redis.Options{}))
	fmt.Println(store.Key("ip:203.0.113.7", core.GCRA))
	fmt.Println(store.Key("user:{weird}", core.FixedWindow))
	// Output:
	// sluice:{ip:203.0.113.7}:gc
	// sluice:{user:%7Bweird%7D}:fw
}

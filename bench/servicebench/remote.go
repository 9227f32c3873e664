package servicebench

import (
	"github.com/sluicehq/sluice/bench/redisbench"
	"github.com/sluicehq/sluice/service/remotestore"
)

// remoteStoreDecider is the remote store a middleware would use with
// ratelimitd as its backend: remotestore.New on one connection (its default
// batching of concurrent Takes), one Take of one op per decision, decided by
// ratelimitd's own store.
func remoteStoreDecider(c Conn) (redisbench.Decider, func(), error) {
	st := remotestore.New(c.GRPC[0])
	return storeDecider{st}, func() { st.Close() }, nil
}

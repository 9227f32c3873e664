package remotestore_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/remotestore"
)

// Whatever bytes arrive as a TakeRequest, the server answers one result per
// op or INVALID_ARGUMENT (its memory store never fails otherwise), and
// never panics.
func FuzzServerTake(f *testing.F) {
	seed := func(r *ratelimitv1.TakeRequest) {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	op := func(id string, alg ratelimitv1.StoreAlgorithm, cost int64) *ratelimitv1.StoreOp {
		return &ratelimitv1.StoreOp{
			Key:   &ratelimitv1.StoreKey{Identity: []byte(id), Policy: []byte("p")},
			Limit: &ratelimitv1.StoreLimit{Algorithm: alg, Rate: 5, Period: durationpb.New(time.Second), Burst: 7},
			Cost:  cost,
		}
	}
	seed(&ratelimitv1.TakeRequest{Ops: []*ratelimitv1.StoreOp{op("a", 1, 1)}})
	seed(&ratelimitv1.TakeRequest{Ops: []*ratelimitv1.StoreOp{op("a", 1, 1), op("b", 3, 2)}})
	seed(&ratelimitv1.TakeRequest{Ops: []*ratelimitv1.StoreOp{{Key: &ratelimitv1.StoreKey{Identity: []byte{0xff}}, MaxDelay: durationpb.New(time.Second)}}})
	f.Add([]byte{})

	srv := remotestore.NewServer(memory(f, nil), remotestore.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	f.Fuzz(func(t *testing.T, data []byte) {
		req := new(ratelimitv1.TakeRequest)
		if proto.Unmarshal(data, req) != nil {
			return
		}
		resp, err := srv.Take(context.Background(), req)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("%v for %v", err, req)
			}
			return
		}
		if len(resp.Results) != len(req.Ops) {
			t.Fatalf("%d results for %d ops", len(resp.Results), len(req.Ops))
		}
	})
}

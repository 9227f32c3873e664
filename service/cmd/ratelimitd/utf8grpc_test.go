package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sluicehq/sluice/service/internal/rawtext/rawtexttest"
	"github.com/sluicehq/sluice/service/ratelimitv1"
	"github.com/sluicehq/sluice/service/remotestore"
	"github.com/sluicehq/sluice/service/rulesdb"
)

// rawCodec sends a request's bytes as they are: a message protobuf-go
// would refuse to marshal (a string that is not UTF-8), as a client in
// another language could send it.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }

func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// A gRPC request (of every method of the native API and Envoy's, every
// string field of its message, nested ones included) whose string is not
// valid UTF-8 is refused by protobuf-go when ratelimitd decodes it, before
// any handler or interceptor runs (grpc-go answers INTERNAL "error
// unmarshalling request: ... invalid UTF-8"): nothing is counted, reset or
// audited. The store API's keys are bytes, not strings: any bytes are a
// key (TestStoreAPICannotReachTheServiceKeys sends them).
func TestGRPCStringsMustBeUTF8(t *testing.T) {
	t.Parallel()
	ctx := dbctx(t)
	dsn := "file:" + filepath.Join(t.TempDir(), "rules.db")
	db, err := rulesdb.Open(ctx, dsn)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Create(ctx, "cli:test", ordersRule(5))
	require.NoError(t, err)
	write, _, err := db.CreateToken(ctx, "cli:test", "ops", rulesdb.ScopeWrite)
	require.NoError(t, err)
	before, err := db.Revision(ctx)
	require.NoError(t, err)
	p := startServer(t, nil, "--db", dsn)
	conn := p.Conn(t)

	check := &ratelimitv1.CheckRequest{Identifier: "alice", Dimension: "user", Endpoint: "/api/orders/1", RuleId: "orders", IdempotencyKey: "k"}
	envoy := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	calls := map[string]proto.Message{
		"/sluice.ratelimit.v1.RateLimitService/CheckRateLimit":      check,
		"/sluice.ratelimit.v1.RateLimitService/GetRemainingQuota":   check,
		"/sluice.ratelimit.v1.RateLimitService/Report":              check,
		"/sluice.ratelimit.v1.RateLimitService/CheckRateLimitBatch": &ratelimitv1.BatchRequest{Checks: []*ratelimitv1.CheckRequest{check}},
		"/sluice.ratelimit.v1.RateLimitService/ResetLimit": &ratelimitv1.ResetRequest{Identifier: "alice", Dimension: "user",
			Endpoint: "/api/orders/1", RuleId: "orders"},
		"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit": envoy,
	}
	// Every method of the native API has its request here.
	sd := ratelimitv1.File_sluice_ratelimit_v1_ratelimit_proto.Services().ByName("RateLimitService")
	for i := range sd.Methods().Len() {
		name := fmt.Sprintf("/%s/%s", sd.FullName(), sd.Methods().Get(i).Name())
		require.Contains(t, calls, name, "a request for %s", name)
	}
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sent := 0
	for method, msg := range calls {
		for _, field := range stringFields(msg.ProtoReflect(), "") {
			for _, s := range rawtexttest.Invalid {
				raw := withBytes(t, msg, field, s.Bytes)
				var out []byte
				err := conn.Invoke(cctx, method, &raw, &out, grpc.ForceCodec(rawCodec{}),
					grpc.PerRPCCredentials(remotestore.InsecureTokenCredentials(write)))
				st := status.Convert(err)
				require.Equal(t, codes.Internal, st.Code(), "%s %s %s: %v", method, field, s.Name, err)
				require.Contains(t, st.Message(), "invalid UTF-8", "%s %s", method, field)
				sent++
			}
		}
	}
	t.Logf("%d requests refused", sent)
	native := ratelimitv1.NewRateLimitServiceClient(conn)
	r, err := native.GetRemainingQuota(cctx, &ratelimitv1.CheckRequest{Identifier: "alice", Dimension: "user", Endpoint: "/api/orders/1"})
	require.NoError(t, err)
	require.EqualValues(t, 5, r.GetRemaining(), "nothing counted")
	after, err := db.Revision(ctx)
	require.NoError(t, err)
	require.Equal(t, before, after, "nothing audited")
}

// stringFields lists the paths of the set string fields of m, nested
// messages and lists included ("checks.0.identifier").
func stringFields(m protoreflect.Message, prefix string) []string {
	var out []string
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := prefix + string(fd.Name())
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				out = append(out, stringFields(v.List().Get(i).Message(), fmt.Sprintf("%s.%d.", name, i))...)
			}
		case fd.Message() != nil && !fd.IsMap():
			out = append(out, stringFields(v.Message(), name+".")...)
		case fd.Kind() == protoreflect.StringKind && !fd.IsList():
			out = append(out, name)
		}
		return true
	})
	return out
}

// withBytes is m's wire form with the string field at path replaced by
// bad: marshalled with a placeholder as long, which is then replaced.
func withBytes(t *testing.T, m proto.Message, path, bad string) []byte {
	t.Helper()
	c := proto.Clone(m)
	hole := strings.Repeat("\x07", len(bad))
	set(c.ProtoReflect(), strings.Split(path, "."), hole)
	b, err := proto.Marshal(c)
	require.NoError(t, err)
	require.Equal(t, 1, bytes.Count(b, []byte(hole)))
	return bytes.Replace(b, []byte(hole), []byte(bad), 1)
}

// set sets the string field at path of m.
func set(m protoreflect.Message, path []string, v string) {
	fd := m.Descriptor().Fields().ByName(protoreflect.Name(path[0]))
	switch {
	case len(path) == 1:
		m.Set(fd, protoreflect.ValueOfString(v))
	case fd.IsList():
		var i int
		_, _ = fmt.Sscan(path[1], &i)
		set(m.Mutable(fd).List().Get(i).Message(), path[2:], v)
	default:
		set(m.Mutable(fd).Message(), path[1:], v)
	}
}

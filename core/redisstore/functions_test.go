package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/limitertest"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The store runs its code as functions where it can, and as scripts where
// functions are off, missing (a server without FCALL, like Redis 6) or
// refused (an ACL): the decisions are the same either way.
func TestFunctionsOrScripts(t *testing.T) {
	ctx := context.Background()
	renamed := redistest.StartServer(t, "--rename-command", "FCALL", "", "--rename-command", "FUNCTION", "")
	acl := redistest.StartServer(t)
	admin := acl.Client(t)
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "limited", "on", ">pw", "~*", "&*", "+@all", "-fcall", "-function").Err())
	plain := redistest.StartServer(t)
	for _, tc := range []struct {
		name      string
		srv       *redistest.Server
		user      string
		functions bool
		want      string // the command that ran the decisions
	}{
		{"functions", plain, "", true, "fcall"},
		{"WithFunctions(false)", plain, "", false, "evalsha"},
		{"server without FCALL", renamed, "", true, "evalsha"},
		{"ACL refuses FCALL", acl, "limited", true, "evalsha"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stats := tc.srv.Client(t)
			require.NoError(t, stats.ConfigResetStat(ctx).Err())
			if tc.srv != renamed {
				require.NoError(t, stats.FunctionFlush(ctx).Err())
			}
			for _, pipelined := range []int{0, 2} {
				client := tc.srv.Client(t, func(o *redis.Options) {
					if tc.user != "" {
						o.Username, o.Password = tc.user, "pw"
					}
				})
				s := newStore(t, client, redisstore.WithFunctions(tc.functions), redisstore.WithPipelining(pipelined, pipelined*64), redisstore.WithTimeout(5*time.Second))
				for _, a := range limitertest.Algorithms {
					l := core.PerMinute(3).WithAlgorithm(a)
					key := limitertest.Key(t).Identity
					for i := range 4 {
						r, err := takeID(ctx, s, key, l, 1)
						require.NoError(t, err)
						require.Equal(t, i < 3, r.Allowed, "%s take %d", a, i)
					}
					// Multi-op and refund calls take the same way.
					out := make([]core.Result, 2)
					ops := []core.Op{{Key: core.Key{Identity: key, Policy: "a"}, Limit: l, Cost: 2}, {Key: core.Key{Identity: key, Policy: "b"}, Limit: l, Cost: 1}}
					require.NoError(t, s.Take(ctx, ops, out))
					require.True(t, out[0].Allowed && out[1].Allowed)
					require.Equal(t, int64(1), out[0].Remaining)
					require.NoError(t, s.Refund(ctx, core.Admission{Key: ops[0].Key, Limit: l, Cost: 2, At: out[0].At}))
					r, err := limitertest.TakeOne(ctx, s, ops[0].Key, l, 0)
					require.NoError(t, err)
					require.Equal(t, int64(3), r.Remaining)
				}
			}
			calls := scriptCalls(t, stats)
			require.Positive(t, calls[tc.want])
			libs, err := stats.Do(ctx, "FUNCTION", "LIST").Slice()
			if tc.want == "fcall" {
				require.Zero(t, calls["evalsha"]+calls["eval"], "%v", calls)
				require.NoError(t, err)
				require.Len(t, libs, 1, "one library")
				require.Contains(t, flatten(libs), "sluice_", "library name")
			} else {
				require.Zero(t, calls["fcall"], "%v", calls)
				if err == nil {
					require.Empty(t, libs, "no library loaded")
				}
			}
		})
	}
}

func flatten(v any) string {
	switch v := v.(type) {
	case []any:
		var b strings.Builder
		for _, e := range v {
			b.WriteString(flatten(e))
			b.WriteByte(' ')
		}
		return b.String()
	case map[any]any:
		var b strings.Builder
		for k, e := range v {
			b.WriteString(flatten(k) + "=" + flatten(e) + " ")
		}
		return b.String()
	case string:
		return v
	default:
		return ""
	}
}

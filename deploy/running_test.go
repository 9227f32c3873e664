package deploy

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
)

// podEnv is the environment the Deployment gives its container, with
// Redis at redisAddr: plain values as written, resource fields resolved
// as the kubelet does, and optional Secrets absent (a required one fails
// the test: it cannot be had here).
func podEnv(t *testing.T, c *corev1.Container, redisAddr string) []string {
	t.Helper()
	var env []string
	for _, e := range c.Env {
		switch {
		case e.Name == "RATELIMITD_REDIS":
			env = append(env, e.Name+"=redis://"+redisAddr)
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.SecretKeyRef != nil:
			require.True(t, e.ValueFrom.SecretKeyRef.Optional != nil && *e.ValueFrom.SecretKeyRef.Optional, "%s: a required Secret", e.Name)
		case e.ValueFrom.ResourceFieldRef != nil:
			require.Equal(t, "limits.memory", e.ValueFrom.ResourceFieldRef.Resource, e.Name)
			env = append(env, e.Name+"="+strconv.FormatInt(c.Resources.Limits.Memory().Value(), 10))
		default:
			require.Fail(t, "an env source this test cannot resolve", e.Name)
		}
	}
	return env
}

// TestAgainstRunningRatelimitd runs ratelimitd as the Deployment does (its
// args and environment, the rules ConfigMap as its mounted directory, a
// real Redis; only the listen addresses are loopback ports of the
// kernel's choosing) and checks the deployment files against it: every
// descriptor the Envoy configuration sends is limited by a rule, the Envoy
// cluster's health check is answered, every expression of the dashboard
// and of the alerting rules names only series this process serves, with
// labels and values they carry, and a SIGTERM drains as the pod's probes
// and grace period expect.
func TestAgainstRunningRatelimitd(t *testing.T) {
	t.Parallel()
	m := loadManifests(t)
	e := loadEnvoy(t)
	c := &m.deployments[0].Spec.Template.Spec.Containers[0]
	require.Equal(t, "serve", c.Args[0])
	args := setFlags(t, c.Args, map[string]string{
		"--grpc-addr": "127.0.0.1:0", "--http-addr": "127.0.0.1:0", "--rules": rulesDir(t, m),
	})
	p := serve(t, ratelimitd(t), podEnv(t, c, redis(t)), args...)
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()

	t.Run("Envoy's descriptors are limited", func(t *testing.T) { envoyDescriptorsLimited(t, e, conn) })
	t.Run("expressions name served series", func(t *testing.T) { expressionsServed(t, p) })
	t.Run("SIGTERM drains within the grace period", func(t *testing.T) {
		drainsInGrace(t, p, conn, m, duration(t, c.Args, "--drain-delay"))
	})
}

func envoyDescriptorsLimited(t *testing.T, e *envoyConfig, conn *grpc.ClientConn) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(conn)
	require.NotEmpty(t, e.cluster.GetHealthChecks())
	for _, h := range e.cluster.GetHealthChecks() {
		// SERVING once the first ping of Redis is answered.
		require.Eventually(t, func() bool {
			r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: h.GetGrpcHealthCheck().GetServiceName()})
			require.NoError(t, err, "the Envoy cluster's health check names a service ratelimitd knows")
			return r.GetStatus() == healthpb.HealthCheckResponse_SERVING
		}, 5*time.Second, 10*time.Millisecond)
	}
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(descs [][]descriptorEntry) *rlsv3.RateLimitResponse {
		req := &rlsv3.RateLimitRequest{Domain: e.ratelimit.GetDomain(), HitsAddend: 1}
		for _, d := range descs {
			rd := &commonrl.RateLimitDescriptor{}
			for _, en := range d {
				rd.Entries = append(rd.Entries, &commonrl.RateLimitDescriptor_Entry{Key: en.key, Value: en.value})
			}
			req.Descriptors = append(req.Descriptors, rd)
		}
		resp, err := rls.ShouldRateLimit(ctx, req)
		require.NoError(t, err)
		require.Len(t, resp.GetStatuses(), len(descs))
		return resp
	}
	for _, r := range []struct {
		path   string
		header map[string]string
		want   int
	}{
		{"/", nil, 1},
		{"/orders", map[string]string{"x-api-key": "k1"}, 2},
		{"/login", nil, 2},
	} {
		descs := envoyDescriptors(t, e, r.path, "192.0.2.10", r.header)
		require.Len(t, descs, r.want, "%s %v", r.path, r.header)
		for i, s := range ask(descs).GetStatuses() {
			require.NotNil(t, s.GetCurrentLimit(), "%s: descriptor %v matches no rule: Envoy would send it unlimited", r.path, descs[i])
		}
	}
	// Sign-ins are 5 a minute per address: the sixth is over the limit.
	descs := envoyDescriptors(t, e, "/login", "192.0.2.11", nil)
	for i := range 7 {
		want := rlsv3.RateLimitResponse_OK
		if i >= 5 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		require.Equal(t, want, ask(descs).GetOverallCode(), "sign-in %d", i+1)
	}
}

func expressionsServed(t *testing.T, p *proc) {
	code, body := get(t, p.url("/metrics"))
	require.Equal(t, http.StatusOK, code)
	s, err := parseExposition(body)
	require.NoError(t, err)
	require.Contains(t, s, "ratelimitd_decisions_total", "the checks above made decisions")

	data, err := os.ReadFile(filepath.Join("grafana", "ratelimitd.json"))
	require.NoError(t, err)
	dash := dashboardExprs(t, data)
	require.GreaterOrEqual(t, len(dash), 20)
	for where, expr := range dash {
		require.NoError(t, checkExpr(expr, s, nil), "dashboard %s: %s", where, expr)
	}
	rules, recorded := alertExprs(t)
	require.GreaterOrEqual(t, len(rules), 10)
	// up is the scrape's own series, which Prometheus writes for every target.
	extra := append(recorded, "up")
	for where, expr := range rules {
		require.NoError(t, checkExpr(expr, s, extra), "rules %s: %s", where, expr)
	}
}

func drainsInGrace(t *testing.T, p *proc, conn *grpc.ClientConn, m *manifests, drain time.Duration) {
	grace := time.Duration(*m.deployments[0].Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	start := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool {
		code, body := get(t, p.url("/readyz"))
		var r struct {
			Draining bool `json:"draining"`
		}
		return code == http.StatusServiceUnavailable && json.Unmarshal([]byte(body), &r) == nil && r.Draining
	}, time.Second, 10*time.Millisecond, "readiness fails at once")
	// Still answering meanwhile: the probes, the health service, checks.
	code, _ := get(t, p.url("/healthz"))
	require.Equal(t, http.StatusOK, code, "alive while draining: the liveness probe does not restart it")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, r.GetStatus(), "Envoy's health check sees the drain")
	require.Less(t, time.Since(start), drain, "the checks above ran inside the drain delay")

	select {
	case <-p.done:
	case <-time.After(grace):
		t.Fatalf("still running %s after SIGTERM: the kubelet would kill it", grace)
	}
	took := time.Since(start)
	require.Equal(t, 0, p.exit, p.logs.String())
	require.GreaterOrEqual(t, took, drain, "it answered for the whole drain delay")
	t.Logf("SIGTERM to exit: %s (drain delay %s, grace period %s)", took.Round(time.Millisecond), drain, grace)
}

package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"
)

// envoyConfig is deploy/envoy/envoy.yaml, decoded.
type envoyConfig struct {
	bootstrap *bootstrapv3.Bootstrap
	hcm       *hcmv3.HttpConnectionManager
	ratelimit *ratelimitv3.RateLimit
	cluster   *clusterv3.Cluster // the ratelimit filter's
}

// decodeEnvoy decodes an Envoy bootstrap in YAML into go-control-plane's
// types (unknown fields and unknown typed_config types refused) and runs
// their generated validation (ValidateAll) on it and on every message
// packed in an Any (typed_config, typed_extension_protocol_options,
// typed_per_filter_config), which the bootstrap's own validation does not
// open.
func decodeEnvoy(data []byte) (*bootstrapv3.Bootstrap, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(js, b); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	if err := validateDeep(b); err != nil {
		return nil, err
	}
	return b, nil
}

// validateDeep validates m and, recursively, every message it holds,
// unpacking Anys.
func validateDeep(m proto.Message) error {
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().FullName(), err)
		}
	}
	if a, ok := m.(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return fmt.Errorf("%s: %w", a.GetTypeUrl(), err)
		}
		return validateDeep(inner)
	}
	var err error
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				err = validateDeep(mv.Message().Interface())
				return err == nil
			})
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len() && err == nil; i++ {
				err = validateDeep(v.List().Get(i).Message().Interface())
			}
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			err = validateDeep(v.Message().Interface())
		}
		return err == nil
	})
	return err
}

// loadEnvoy decodes deploy/envoy/envoy.yaml and finds its rate-limit
// filter and the cluster that filter calls.
func loadEnvoy(t *testing.T) *envoyConfig {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("envoy", "envoy.yaml"))
	require.NoError(t, err)
	b, err := decodeEnvoy(data)
	require.NoError(t, err)
	e := &envoyConfig{bootstrap: b}
	require.Len(t, b.GetStaticResources().GetListeners(), 1)
	chains := b.GetStaticResources().GetListeners()[0].GetFilterChains()
	require.Len(t, chains, 1)
	require.Len(t, chains[0].GetFilters(), 1)
	e.hcm = &hcmv3.HttpConnectionManager{}
	require.NoError(t, chains[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(e.hcm))
	filters := e.hcm.GetHttpFilters()
	require.GreaterOrEqual(t, len(filters), 2)
	require.Equal(t, "envoy.filters.http.router", filters[len(filters)-1].GetName(), "the router comes last")
	for _, f := range filters {
		if f.GetName() == "envoy.filters.http.ratelimit" {
			e.ratelimit = &ratelimitv3.RateLimit{}
			require.NoError(t, f.GetTypedConfig().UnmarshalTo(e.ratelimit))
		}
	}
	require.NotNil(t, e.ratelimit, "the ratelimit filter")
	name := e.ratelimit.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == name {
			e.cluster = c
		}
	}
	require.NotNil(t, e.cluster, "cluster %q", name)
	return e
}

// TestEnvoyConfigValidates: deploy/envoy/envoy.yaml decodes into
// go-control-plane's types and passes their generated validation, its
// ratelimit filter names the domain of the rules ConfigMap and calls
// ratelimitd's headless gRPC Service at its port, over HTTP/2, with the v3
// protocol; and errors planted in copies of it are refused (by the decoder
// or by the validation, inside typed_config too).
func TestEnvoyConfigValidates(t *testing.T) {
	e := loadEnvoy(t)
	m := loadManifests(t)
	var rules struct {
		Domain string `json:"domain"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(m.configMaps[0].Data["edge.yaml"]), &rules))
	require.Equal(t, rules.Domain, e.ratelimit.GetDomain(), "the rules' domain")
	require.Equal(t, "V3", e.ratelimit.GetRateLimitService().GetTransportApiVersion().String())

	var grpcSvc string
	var grpcPort int32
	for _, s := range m.services {
		for _, p := range s.Spec.Ports {
			if p.Name == "grpc" {
				grpcSvc, grpcPort = s.Name+"."+s.Namespace+".svc.cluster.local", p.Port
				require.Equal(t, "None", s.Spec.ClusterIP, "headless: Envoy sees every pod")
			}
		}
	}
	eps := e.cluster.GetLoadAssignment().GetEndpoints()
	require.Len(t, eps, 1)
	require.Len(t, eps[0].GetLbEndpoints(), 1)
	sa := eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	require.Equal(t, grpcSvc, sa.GetAddress())
	require.Equal(t, uint32(grpcPort), sa.GetPortValue())
	require.Equal(t, clusterv3.Cluster_STRICT_DNS, e.cluster.GetType())
	opts := &httpv3.HttpProtocolOptions{}
	require.NoError(t, e.cluster.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].UnmarshalTo(opts))
	require.NotNil(t, opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions(), "gRPC needs HTTP/2")

	data, err := os.ReadFile(filepath.Join("envoy", "envoy.yaml"))
	require.NoError(t, err)
	for name, c := range map[string][2]string{
		"unknown field":          {"stat_prefix: ingress", "stat_prefix: ingress\n                statprefix: x"},
		"in a typed_config":      {"failure_mode_deny: false", "failure_mode_deny: false\n                      failure_mode_denied: true"},
		"empty domain":           {"domain: edge", `domain: ""`},
		"port out of range":      {"port_value: 8081", "port_value: 80810"},
		"unknown typed_config":   {"filters.http.router.v3.Router", "filters.http.router.v3.Routr"},
		"bad api version":        {"transport_api_version: V3", "transport_api_version: V4"},
		"negative health thresh": {"unhealthy_threshold: 1", "unhealthy_threshold: -1"},
		"empty header name":      {"header_name: x-api-key", `header_name: ""`},
		"per-route enum":         {"vh_rate_limits: INCLUDE", "vh_rate_limits: INCLUDES"},
	} {
		t.Run(name, func(t *testing.T) {
			bad := strings.Replace(string(data), c[0], c[1], 1)
			require.NotEqual(t, string(data), bad, "the planted error must change the file")
			_, err := decodeEnvoy([]byte(bad))
			require.Error(t, err)
		})
	}
}

// descriptorEntry is one entry of a descriptor Envoy sends.
type descriptorEntry struct{ key, value string }

// envoyDescriptors are the descriptors Envoy's rate_limits actions make of
// a request to path from client with the given headers: the route's
// rate_limits, then the virtual host's (when the route has none, or its
// RateLimitPerRoute says INCLUDE). An action of a kind this reading does
// not know fails the test, rather than being left out.
func envoyDescriptors(t *testing.T, e *envoyConfig, path, client string, header map[string]string) [][]descriptorEntry {
	t.Helper()
	vhs := e.hcm.GetRouteConfig().GetVirtualHosts()
	require.Len(t, vhs, 1)
	var route *routev3.Route
	for _, r := range vhs[0].GetRoutes() {
		if strings.HasPrefix(path, r.GetMatch().GetPrefix()) {
			route = r
			break
		}
	}
	require.NotNil(t, route, "a route for %s", path)
	limits := route.GetRoute().GetRateLimits()
	include := len(limits) == 0
	if a, ok := route.GetTypedPerFilterConfig()["envoy.filters.http.ratelimit"]; ok {
		per := &ratelimitv3.RateLimitPerRoute{}
		require.NoError(t, a.UnmarshalTo(per))
		include = include || per.GetVhRateLimits() == ratelimitv3.RateLimitPerRoute_INCLUDE
	}
	if include {
		limits = append(limits, vhs[0].GetRateLimits()...)
	}
	var out [][]descriptorEntry
	for _, rl := range limits {
		if d, ok := descriptorOf(t, rl, client, header); ok {
			out = append(out, d)
		}
	}
	return out
}

// descriptorOf is the descriptor of one rate_limits entry, or false when
// an action skips it (a request header it needs is absent).
func descriptorOf(t *testing.T, rl *routev3.RateLimit, client string, header map[string]string) ([]descriptorEntry, bool) {
	t.Helper()
	var d []descriptorEntry
	for _, a := range rl.GetActions() {
		switch {
		case a.GetRemoteAddress() != nil:
			d = append(d, descriptorEntry{"remote_address", client})
		case a.GetGenericKey() != nil:
			key := a.GetGenericKey().GetDescriptorKey()
			if key == "" {
				key = "generic_key"
			}
			d = append(d, descriptorEntry{key, a.GetGenericKey().GetDescriptorValue()})
		case a.GetRequestHeaders() != nil:
			h := a.GetRequestHeaders()
			v, ok := header[strings.ToLower(h.GetHeaderName())]
			if !ok {
				require.True(t, h.GetSkipIfAbsent(), "without skip_if_absent Envoy sends no descriptor at all")
				return nil, false
			}
			d = append(d, descriptorEntry{h.GetDescriptorKey(), v})
		default:
			require.Fail(t, "an action this test cannot read", "%v", a)
		}
	}
	return d, true
}

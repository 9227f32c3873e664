package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// manifests are the objects of deploy/kubernetes, decoded.
type manifests struct {
	namespaces  []*corev1.Namespace
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	configMaps  []*corev1.ConfigMap
	pdbs        []*policyv1.PodDisruptionBudget
}

// documents splits a YAML stream on its "---" lines.
func documents(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(d, "")) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

// decodeStrict decodes one document into the k8s.io/api type of its
// apiVersion and kind, refusing unknown and duplicated fields.
func decodeStrict(doc []byte, m *manifests) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	var into any
	switch gvk := tm.APIVersion + " " + tm.Kind; gvk {
	case "v1 Namespace":
		v := &corev1.Namespace{}
		m.namespaces, into = append(m.namespaces, v), v
	case "apps/v1 Deployment":
		v := &appsv1.Deployment{}
		m.deployments, into = append(m.deployments, v), v
	case "v1 Service":
		v := &corev1.Service{}
		m.services, into = append(m.services, v), v
	case "v1 ConfigMap":
		v := &corev1.ConfigMap{}
		m.configMaps, into = append(m.configMaps, v), v
	case "policy/v1 PodDisruptionBudget":
		v := &policyv1.PodDisruptionBudget{}
		m.pdbs, into = append(m.pdbs, v), v
	default:
		return fmt.Errorf("no type for %q", gvk)
	}
	return yaml.UnmarshalStrict(doc, into)
}

// loadManifests decodes every *.yaml of deploy/kubernetes strictly.
func loadManifests(t *testing.T) *manifests {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("kubernetes", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	m := &manifests{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		for i, doc := range documents(data) {
			require.NoError(t, decodeStrict(doc, m), "%s, document %d", f, i+1)
		}
	}
	require.Len(t, m.deployments, 1)
	require.Len(t, m.configMaps, 1)
	require.Len(t, m.pdbs, 1)
	require.Len(t, m.services, 2)
	return m
}

// TestKubernetesManifestsDecodeStrictly: every document of
// deploy/kubernetes decodes into its k8s.io/api type with unknown fields
// refused, and the decoder does refuse a misspelled field, a field at the
// wrong level and a duplicated one (each planted in a copy of the real
// Deployment).
func TestKubernetesManifestsDecodeStrictly(t *testing.T) {
	loadManifests(t)
	data, err := os.ReadFile(filepath.Join("kubernetes", "deployment.yaml"))
	require.NoError(t, err)
	for name, c := range map[string][2]string{
		"misspelled":  {"          readinessProbe:\n", "          readinesProbe:\n"},
		"wrong level": {"      terminationGracePeriodSeconds: 20\n", "      containers2: []\n      terminationGracePeriodSeconds: 20\n"},
		"duplicated":  {"  replicas: 3\n", "  replicas: 3\n  replicas: 2\n"},
		"wrong type":  {"  replicas: 3\n", "  replicas: three\n"},
		"probe field": {"            periodSeconds: 2\n", "            periodSecond: 2\n"},
		// resources are a map: any key decodes, so resourceNames checks them.
		"resource key": {"              cpu: 250m\n", "              cpus: 250m\n"},
	} {
		t.Run(name, func(t *testing.T) {
			bad := strings.Replace(string(data), c[0], c[1], 1)
			require.NotEqual(t, string(data), bad, "the planted error must change the file")
			m := &manifests{}
			if err := decodeStrict([]byte(bad), m); err == nil {
				require.Len(t, m.deployments, 1)
				err = resourceNames(m.deployments[0])
				require.Error(t, err, "decoded, and no check refused it")
			}
		})
	}
}

// resourceNames checks that the containers' requests and limits name
// resources a kubelet knows (the decoder takes any map key).
func resourceNames(d *appsv1.Deployment) error {
	known := []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage}
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, l := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
			for name := range l {
				if !slices.Contains(known, name) {
					return fmt.Errorf("container %s: unknown resource %q", c.Name, name)
				}
			}
		}
	}
	return nil
}

// TestKubernetesManifestsAgree: the objects fit together as a cluster
// needs them to: selectors that select the pods, Service and probe ports
// that name container ports, the rules ConfigMap mounted where --rules
// reads, resources set, and a shutdown that fits: the readiness probe
// sees the drain within --drain-delay, and terminationGracePeriodSeconds
// covers --drain-delay and --shutdown-timeout with room to spare.
func TestKubernetesManifestsAgree(t *testing.T) {
	m := loadManifests(t)
	d := m.deployments[0]
	require.Len(t, m.namespaces, 1)
	ns := m.namespaces[0].Name
	pod := labels.Set(d.Spec.Template.Labels)
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	require.NoError(t, err)
	require.True(t, sel.Matches(pod), "the Deployment selects its own pods")
	require.GreaterOrEqual(t, *d.Spec.Replicas, int32(2))
	for _, o := range []metav1.ObjectMeta{d.ObjectMeta, m.configMaps[0].ObjectMeta, m.pdbs[0].ObjectMeta, m.services[0].ObjectMeta, m.services[1].ObjectMeta} {
		require.Equal(t, ns, o.Namespace, o.Name)
	}

	require.Len(t, d.Spec.Template.Spec.Containers, 1)
	c := d.Spec.Template.Spec.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, s := range m.services {
		require.True(t, labels.SelectorFromSet(s.Spec.Selector).Matches(pod), "Service %s selects the pods", s.Name)
		for _, p := range s.Spec.Ports {
			require.Contains(t, ports, p.TargetPort.String(), "Service %s port %s names a container port", s.Name, p.Name)
		}
	}
	pdbSel, err := metav1.LabelSelectorAsSelector(m.pdbs[0].Spec.Selector)
	require.NoError(t, err)
	require.True(t, pdbSel.Matches(pod), "the PodDisruptionBudget covers the pods")
	require.NotNil(t, m.pdbs[0].Spec.MaxUnavailable)
	require.Less(t, m.pdbs[0].Spec.MaxUnavailable.IntValue(), int(*d.Spec.Replicas))

	grpcPort, httpPort := listenPort(t, c.Args, "--grpc-addr"), listenPort(t, c.Args, "--http-addr")
	require.Equal(t, grpcPort, fmt.Sprint(ports["grpc"]))
	require.Equal(t, httpPort, fmt.Sprint(ports["http"]))
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		require.Contains(t, ports, p.HTTPGet.Port.String())
	}
	require.Equal(t, httpPort, d.Spec.Template.Annotations["prometheus.io/port"], "Prometheus scrapes the HTTP port")

	require.NoError(t, resourceNames(d))
	require.False(t, c.Resources.Requests.Cpu().IsZero(), "a CPU request")
	require.False(t, c.Resources.Requests.Memory().IsZero(), "a memory request")
	require.False(t, c.Resources.Limits.Memory().IsZero(), "a memory limit")

	rules, ok := flagValue(c.Args, "--rules")
	require.True(t, ok)
	mounted := false
	for _, vm := range c.VolumeMounts {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil && v.ConfigMap.Name == m.configMaps[0].Name {
				require.Equal(t, rules, vm.MountPath, "--rules reads the ConfigMap's directory")
				require.Empty(t, vm.SubPath, "a subPath mount never sees an edit")
				mounted = true
			}
		}
	}
	require.True(t, mounted, "the rules ConfigMap is mounted")

	drain, shutdown := duration(t, c.Args, "--drain-delay"), duration(t, c.Args, "--shutdown-timeout")
	rp := c.ReadinessProbe
	require.LessOrEqual(t, time.Duration(rp.PeriodSeconds*rp.FailureThreshold)*time.Second, drain,
		"readiness sees the drain before ratelimitd stops accepting")
	require.Nil(t, c.Lifecycle, "no preStop: --drain-delay is the drain")
	grace := time.Duration(*d.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	require.GreaterOrEqual(t, grace, drain+shutdown+2*time.Second, "the kubelet's SIGKILL comes after the drain and the shutdown")
}

// listenPort is the port of a listen-address flag.
func listenPort(t *testing.T, args []string, name string) string {
	t.Helper()
	v, ok := flagValue(args, name)
	require.True(t, ok, name)
	i := strings.LastIndexByte(v, ':')
	require.Positive(t, i, "%s=%s", name, v)
	return v[i+1:]
}

// duration is the value of a duration flag.
func duration(t *testing.T, args []string, name string) time.Duration {
	t.Helper()
	v, ok := flagValue(args, name)
	require.True(t, ok, name)
	d, err := time.ParseDuration(v)
	require.NoError(t, err, name)
	return d
}

// rulesDir writes the rules ConfigMap's files into a directory, as the
// kubelet mounts them.
func rulesDir(t *testing.T, m *manifests) string {
	t.Helper()
	dir := t.TempDir()
	keys := make([]string, 0, len(m.configMaps[0].Data))
	for k := range m.configMaps[0].Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		require.NoError(t, os.WriteFile(filepath.Join(dir, k), []byte(m.configMaps[0].Data[k]), 0o600))
	}
	return dir
}

// TestKubernetesRulesValidate: every file of the rules ConfigMap passes
// `ratelimitd validate`, and so does the directory as --rules reads it.
func TestKubernetesRulesValidate(t *testing.T) {
	m := loadManifests(t)
	dir := rulesDir(t, m)
	bin := ratelimitd(t)
	out, code := run(t, ".", bin, "validate", dir)
	require.Equal(t, 0, code, out)
	// A broken copy is refused, naming the field.
	data := bytes.Replace([]byte(m.configMaps[0].Data["edge.yaml"]), []byte("unit: minute"), []byte("unit: fortnight"), 1)
	bad := filepath.Join(t.TempDir(), "edge.yaml")
	require.NoError(t, os.WriteFile(bad, data, 0o600))
	out, code = run(t, ".", bin, "validate", bad)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "rate_limit.unit")
}

// Package deploy holds no code: its tests check the deployment files
// beside it (Prometheus alerting rules, a Grafana dashboard, Kubernetes
// manifests, an Envoy configuration, a systemd unit) against the tools and
// types that read them, and against a running ratelimitd.
package deploy

// Package deploy holds the deployment guide and its files (README.md): a
// Prometheus per farm site, the agent path to Mimir or Thanos, a systemd
// unit and an Alloy configuration per farm host, a Docker Compose demo and
// a Kubernetes example. Its tests parse every YAML file and check the
// Prometheus configurations with promtool; there is no Go code to import.
package deploy

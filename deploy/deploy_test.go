package deploy

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/internal/realtest"
	"go.yaml.in/yaml/v3"
)

// yamlDocs decodes every document of a YAML file.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for i, d := range yamlValues(t, path) {
		m, ok := d.(map[string]any)
		if !ok {
			t.Fatalf("%s: document %d is a %T, want a mapping", path, i, d)
		}
		out = append(out, m)
	}
	return out
}

// yamlValues decodes every document of a YAML file, of any shape.
func yamlValues(t *testing.T, path string) []any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []any
	for {
		var d any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, d)
	}
	return docs
}

// TestEveryYAMLParses parses every YAML file of deploy/ and mixin/.
func TestEveryYAMLParses(t *testing.T) {
	n := 0
	for _, root := range []string{".", "../mixin"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".yml") || strings.HasSuffix(path, ".yaml")) {
				return err
			}
			n++
			docs := yamlValues(t, path)
			if len(docs) == 0 {
				t.Errorf("%s: no YAML document", path)
			}
			for i, d := range docs {
				if d == nil {
					t.Errorf("%s: document %d is empty", path, i)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n < 12 {
		t.Errorf("only %d YAML files found", n)
	}
	t.Logf("%d YAML files parsed", n)
}

func promtool(t *testing.T) string { return realtest.Program(t, "promtool", "prometheus") }

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPromtoolCheckConfig checks every Prometheus configuration with
// `promtool check config`, laid out as the guide says: the mixin rules in
// rules/ and the targets in targets/ next to it, so that promtool also
// checks the rules and the service discovery files.
func TestPromtoolCheckConfig(t *testing.T) {
	bin := promtool(t)
	rules, _ := filepath.Glob("../mixin/rules/*.yml")
	targets, _ := filepath.Glob("prometheus/targets/*.yml")
	if len(rules) == 0 || len(targets) == 0 {
		t.Fatalf("rules %v, targets %v", rules, targets)
	}
	for _, cfg := range []string{"prometheus/prometheus.yml", "prometheus/agent.yml", "compose/prometheus.yml", "kubernetes/prometheus.yml"} {
		t.Run(cfg, func(t *testing.T) {
			dir := t.TempDir()
			copyFile(t, cfg, filepath.Join(dir, "prometheus.yml"))
			for _, r := range rules {
				copyFile(t, r, filepath.Join(dir, "rules", filepath.Base(r)))
			}
			for _, f := range targets {
				copyFile(t, f, filepath.Join(dir, "targets", filepath.Base(f)))
			}
			out, err := exec.Command(bin, "check", "config", filepath.Join(dir, "prometheus.yml")).CombinedOutput()
			if err != nil && strings.Contains(string(out), "field kubernetes_sd_configs not found") {
				// Debian builds Prometheus without Kubernetes service
				// discovery: check the rest, with the pods as static targets.
				t.Logf("this promtool has no kubernetes_sd_configs (Debian build); checking the rest with static targets")
				b, _ := os.ReadFile(cfg)
				alt := k8sSD.ReplaceAllString(string(b), "    static_configs:\n      - targets: [\"node-1:9853\"]\n")
				if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(alt), 0o644); err != nil {
					t.Fatal(err)
				}
				out, err = exec.Command(bin, "check", "config", filepath.Join(dir, "prometheus.yml")).CombinedOutput()
			}
			if err != nil {
				t.Fatalf("promtool check config %s: %v\n%s", cfg, err, out)
			}
			cfgText, _ := os.ReadFile(cfg)
			if strings.Contains(string(cfgText), "rule_files") && !strings.Contains(string(out), "rules found") {
				t.Errorf("promtool checked no rules:\n%s", out)
			}
			if strings.Contains(string(cfgText), "relabel_configs") && !strings.Contains(string(cfgText), "target_label: host") {
				t.Errorf("%s: no host label", cfg)
			}
			t.Logf("%s", bytes.TrimSpace(out))
		})
	}
}

// k8sSD matches a kubernetes_sd_configs block of a scrape config.
var k8sSD = regexp.MustCompile(`(?m)^    kubernetes_sd_configs:\n(?:      .*\n)+`)

// TestCompose checks the demo's wiring: the services, every bind-mounted
// file or directory, the build context, the simulate flag, and that
// Prometheus, Alloy and Grafana point at services that exist.
func TestCompose(t *testing.T) {
	docs := yamlDocs(t, "compose/docker-compose.yml")
	services, _ := docs[0]["services"].(map[string]any)
	for _, s := range []string{"alloctrack", "prometheus", "grafana", "pyroscope", "alloy"} {
		if services[s] == nil {
			t.Errorf("no service %s", s)
		}
	}
	mounts := map[string]string{} // target -> source
	for name, sv := range services {
		m, _ := sv.(map[string]any)
		vols, _ := m["volumes"].([]any)
		for _, v := range vols {
			parts := strings.Split(v.(string), ":")
			src := parts[0]
			if !strings.HasPrefix(src, ".") {
				continue
			}
			mounts[parts[1]] = src
			if _, err := os.Stat(filepath.Join("compose", src)); err != nil {
				t.Errorf("service %s mounts %s: %v", name, src, err)
			}
		}
		if b, ok := m["build"].(map[string]any); ok {
			if _, err := os.Stat(filepath.Join("compose", b["context"].(string), "Dockerfile")); err != nil {
				t.Errorf("service %s: build context: %v", name, err)
			}
		}
	}
	if cmd := services["alloctrack"].(map[string]any)["command"].([]any); !slices.Contains(cmd, any("--simulate")) {
		t.Errorf("alloctrack command %v: want --simulate", cmd)
	}
	if mounts["/etc/prometheus/rules"] != "../../mixin/rules" || mounts["/etc/prometheus/prometheus.yml"] != "./prometheus.yml" {
		t.Errorf("Prometheus mounts %v: want its config and the mixin rules next to it", mounts)
	}
	prov := yamlDocs(t, "compose/grafana/provisioning/dashboards/dashboards.yml")[0]
	path := prov["providers"].([]any)[0].(map[string]any)["options"].(map[string]any)["path"].(string)
	if mounts[path] != "../../mixin/dashboards" {
		t.Errorf("Grafana reads dashboards from %s, where %q is mounted; want ../../mixin/dashboards", path, mounts[path])
	}
	ds := yamlDocs(t, "compose/grafana/provisioning/datasources/datasources.yml")[0]
	types := map[string]bool{}
	for _, d := range ds["datasources"].([]any) {
		m := d.(map[string]any)
		types[m["type"].(string)] = true
		host := strings.Split(strings.TrimPrefix(m["url"].(string), "http://"), ":")[0]
		if services[host] == nil {
			t.Errorf("data source %s points at %s, which is no service", m["name"], m["url"])
		}
	}
	if !types["prometheus"] || !types["grafana-pyroscope-datasource"] {
		t.Errorf("data sources %v: want Prometheus and Pyroscope", types)
	}
	for _, f := range []string{"compose/prometheus.yml", "compose/config.alloy"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "alloctrack:9853") {
			t.Errorf("%s does not reach the alloctrack service at alloctrack:9853", f)
		}
	}
}

// TestKubernetes checks the example's objects: a DaemonSet with host
// networking and the daemon's health endpoints, a Service and a
// ServiceMonitor on the same named port.
func TestKubernetes(t *testing.T) {
	kinds := map[string]map[string]any{}
	for _, d := range yamlDocs(t, "kubernetes/alloctrack.yaml") {
		if d["apiVersion"] == nil || d["metadata"].(map[string]any)["name"] == nil {
			t.Errorf("object without apiVersion or name: %v", d)
		}
		kinds[d["kind"].(string)] = d
	}
	for _, k := range []string{"Namespace", "DaemonSet", "Service", "ServiceMonitor"} {
		if kinds[k] == nil {
			t.Fatalf("no %s", k)
		}
	}
	pod := kinds["DaemonSet"]["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	if pod["hostNetwork"] != true {
		t.Errorf("DaemonSet without hostNetwork")
	}
	c := pod["containers"].([]any)[0].(map[string]any)
	port := c["ports"].([]any)[0].(map[string]any)
	if port["name"] != "metrics" || port["containerPort"] != 9853 {
		t.Errorf("container port %v", port)
	}
	for probe, path := range map[string]string{"readinessProbe": "/-/ready", "livenessProbe": "/-/healthy"} {
		if got := c[probe].(map[string]any)["httpGet"].(map[string]any)["path"]; got != path {
			t.Errorf("%s path %v, want %s", probe, got, path)
		}
	}
	ep := kinds["ServiceMonitor"]["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
	if ep["port"] != "metrics" {
		t.Errorf("ServiceMonitor port %v", ep["port"])
	}
	if kinds["Service"]["metadata"].(map[string]any)["name"] != "alloctrack" {
		t.Errorf("Service not named alloctrack: the job label (and the alerts) follow its name")
	}
}

package mixin

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/internal/realtest"
	"go.yaml.in/yaml/v3"
)

// promtool returns the path of promtool, or skips the test (fails it when
// CI is set) if it is not installed.
func promtool(t *testing.T) string { return realtest.Program(t, "promtool", "prometheus") }

func dashboards(t *testing.T) []Dashboard {
	t.Helper()
	ds, err := Dashboards()
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 {
		t.Fatalf("%d dashboards, want 2 (farm overview, app)", len(ds))
	}
	return ds
}

// TestDashboardStructure checks what Grafana needs to import the
// dashboards as they are and what makes them work on any Prometheus: unique
// uids, a schemaVersion, a datasource variable used by every panel, target
// and query variable, no panel without a target, unique panel ids, a
// description (the question the panel answers), and a layout inside the
// 24-column grid.
func TestDashboardStructure(t *testing.T) {
	uids := map[string]string{}
	for _, d := range dashboards(t) {
		t.Run(d.File, func(t *testing.T) {
			if d.UID == "" || len(d.UID) > 40 {
				t.Errorf("uid %q: want 1 to 40 characters", d.UID)
			}
			if other, dup := uids[d.UID]; dup {
				t.Errorf("uid %q also used by %s", d.UID, other)
			}
			uids[d.UID] = d.File
			if d.SchemaVersion < 36 {
				t.Errorf("schemaVersion %d, want at least 36 (Grafana 9+)", d.SchemaVersion)
			}
			var dsVar *Variable
			vars := map[string]bool{}
			for i, v := range d.Templating.List {
				if vars[v.Name] {
					t.Errorf("variable %q defined twice", v.Name)
				}
				vars[v.Name] = true
				switch v.Type {
				case "datasource":
					dsVar = &d.Templating.List[i]
				case "query":
					checkDS(t, "variable "+v.Name, v.Datasource)
					if _, _, err := LabelValuesQuery(v.QueryText()); err != nil {
						t.Error(err)
					}
				default:
					t.Errorf("variable %q of type %q: want datasource or query", v.Name, v.Type)
				}
			}
			if dsVar == nil || dsVar.Name != "datasource" || dsVar.QueryText() != "prometheus" {
				t.Fatalf("no datasource variable named datasource of type prometheus: %+v", dsVar)
			}
			ids := map[int]bool{}
			for _, p := range d.Panels {
				if ids[p.ID] {
					t.Errorf("panel id %d used twice", p.ID)
				}
				ids[p.ID] = true
				if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
					t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
				}
			}
			refs := map[string]bool{}
			for _, p := range d.AllPanels() {
				if p.Title == "" || p.Description == "" {
					t.Errorf("panel %d: title %q and description %q: want both", p.ID, p.Title, p.Description)
				}
				checkDS(t, "panel "+p.Title, p.Datasource)
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no target", p.Title)
				}
				seen := map[string]bool{}
				for _, tg := range p.Targets {
					checkDS(t, "panel "+p.Title+" target "+tg.RefID, tg.Datasource)
					if tg.RefID == "" || seen[tg.RefID] {
						t.Errorf("panel %q: refId %q empty or repeated", p.Title, tg.RefID)
					}
					seen[tg.RefID] = true
					if strings.TrimSpace(tg.Expr) == "" {
						t.Errorf("panel %q target %s: empty expr", p.Title, tg.RefID)
					}
					if tg.Instant == tg.Range {
						t.Errorf("panel %q target %s: instant %v, range %v: want exactly one", p.Title, tg.RefID, tg.Instant, tg.Range)
					}
					for _, m := range varUse.FindAllStringSubmatch(tg.Expr, -1) {
						name := m[1] + m[2]
						if !vars[name] && !strings.HasPrefix(name, "__") {
							t.Errorf("panel %q target %s uses $%s, which is not a variable", p.Title, tg.RefID, name)
						}
					}
					n, err := Refs(Substitute(tg.Expr, testVars))
					if err != nil {
						t.Errorf("panel %q target %s: %v", p.Title, tg.RefID, err)
					}
					for _, m := range n.Metrics {
						refs[m] = true
					}
				}
			}
			// Every recorded series a dashboard reads has a rule.
			recorded := recordedNames(t)
			for m := range refs {
				if strings.Contains(m, ":") && !recorded[m] {
					t.Errorf("dashboard reads %s, which no recording rule records", m)
				}
			}
		})
	}
}

var varUse = regexpMust(`\$\{?([A-Za-z_][A-Za-z0-9_]*)|\[\[([A-Za-z_][A-Za-z0-9_]*)\]\]`)

// testVars are values for every variable, for parsing only.
var testVars = map[string]string{
	"job": "alloctrack", "instance": "h:9853", "serial": "s", "package": "p", "datasource": "d",
	"__rate_interval": "1m", "__range": "1h", "__interval": "15s",
}

func checkDS(t *testing.T, what string, ds *DatasourceRef) {
	t.Helper()
	if ds == nil || ds.UID != "${datasource}" || ds.Type != "prometheus" {
		t.Errorf("%s: datasource %+v, want {prometheus ${datasource}} (the variable, not a fixed datasource)", what, ds)
	}
}

// TestReadmeListsEveryPanel keeps the README's dashboard section, which
// stands in for a screenshot, complete: every panel title is listed.
func TestReadmeListsEveryPanel(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	for _, d := range dashboards(t) {
		for _, p := range d.AllPanels() {
			if !strings.Contains(readme, "| "+p.Title+" |") {
				t.Errorf("README.md has no table row for panel %q of %s", p.Title, d.File)
			}
		}
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string
		Rules []struct {
			Record, Alert, Expr string
			Labels, Annotations map[string]string
		}
	}
}

func readRules(t *testing.T, name string) ruleFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("rules", name))
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("rules/%s: %v", name, err)
	}
	return f
}

func recordedNames(t *testing.T) map[string]bool {
	m := map[string]bool{}
	for _, g := range readRules(t, "recording.yml").Groups {
		for _, r := range g.Rules {
			m[r.Record] = true
		}
	}
	return m
}

// TestPromtoolCheckRules runs `promtool check rules`, which also lints.
func TestPromtoolCheckRules(t *testing.T) {
	out, err := exec.Command(promtool(t), "check", "rules", "rules/recording.yml", "rules/alerts.yml").CombinedOutput()
	if err != nil || strings.Contains(string(out), "WARNING") {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// TestPromtoolTestRules runs the unit tests of tests/alerts_test.yml.
func TestPromtoolTestRules(t *testing.T) {
	out, err := exec.Command(promtool(t), "test", "rules", "tests/alerts_test.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// TestEveryAlertTested checks that every alert has a runbook and is tested
// both firing and not firing, and that the rule names the tests use exist.
func TestEveryAlertTested(t *testing.T) {
	alerts := map[string]bool{}
	for _, g := range readRules(t, "alerts.yml").Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a rule that is not an alert", g.Name)
				continue
			}
			alerts[r.Alert] = true
			for _, k := range []string{"summary", "description", "runbook"} {
				if strings.TrimSpace(r.Annotations[k]) == "" {
					t.Errorf("%s: no %s annotation", r.Alert, k)
				}
			}
			if s := r.Labels["severity"]; !slices.Contains([]string{"critical", "warning", "info"}, s) {
				t.Errorf("%s: severity %q", r.Alert, s)
			}
		}
	}
	b, err := os.ReadFile("tests/alerts_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string           `yaml:"alertname"`
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		}
	}
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatal(err)
	}
	if want := []string{"../rules/recording.yml", "../rules/alerts.yml"}; !reflect.DeepEqual(tf.RuleFiles, want) {
		t.Errorf("rule_files %v, want %v", tf.RuleFiles, want)
	}
	firing, quiet := map[string]int{}, map[string]int{}
	for _, tc := range tf.Tests {
		for _, a := range tc.AlertRuleTest {
			if !alerts[a.Alertname] {
				t.Errorf("test of unknown alert %q", a.Alertname)
			}
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname]++
			} else {
				quiet[a.Alertname]++
			}
		}
	}
	for a := range alerts {
		if firing[a] == 0 || quiet[a] == 0 {
			t.Errorf("%s: %d firing and %d not-firing tests, want at least one of each", a, firing[a], quiet[a])
		}
	}
	t.Logf("%d alerts, %d firing and %d not-firing cases", len(alerts), sum(firing), sum(quiet))
}

func sum(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

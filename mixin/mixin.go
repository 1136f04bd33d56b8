package mixin

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
)

//go:embed dashboards/*.json rules/*.yml
var files embed.FS

// Files are the dashboards and rule files, as shipped.
var Files fs.FS = files

// DatasourceRef is a panel's, target's or variable's data source.
type DatasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Target is one query of a panel.
type Target struct {
	RefID        string         `json:"refId"`
	Expr         string         `json:"expr"`
	LegendFormat string         `json:"legendFormat"`
	Instant      bool           `json:"instant"`
	Range        bool           `json:"range"`
	Format       string         `json:"format"`
	Datasource   *DatasourceRef `json:"datasource"`
}

// Link is a panel, field or dashboard link.
type Link struct {
	Title string `json:"title"`
	Type  string `json:"type"`
	URL   string `json:"url"`
}

// Panel is a dashboard panel; rows hold no targets.
type Panel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Description string         `json:"description"`
	Datasource  *DatasourceRef `json:"datasource"`
	Targets     []Target       `json:"targets"`
	Links       []Link         `json:"links"`
	GridPos     struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Panels []Panel `json:"panels"` // of a collapsed row
}

// Variable is a template variable.
type Variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
	Datasource *DatasourceRef  `json:"datasource"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
}

// QueryText is the PromQL of a query variable, or for a datasource
// variable the plugin type.
func (v Variable) QueryText() string {
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	if json.Unmarshal(v.Query, &o) == nil && o.Query != "" {
		return o.Query
	}
	return v.Definition
}

// Dashboard is a Grafana dashboard as far as the tests need it.
type Dashboard struct {
	File          string `json:"-"`
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []Variable `json:"list"`
	} `json:"templating"`
	Links  []Link  `json:"links"`
	Panels []Panel `json:"panels"`
}

// AllPanels returns every panel but rows, including those in collapsed rows.
func (d Dashboard) AllPanels() []Panel {
	var out []Panel
	for _, p := range d.Panels {
		if p.Type == "row" {
			out = append(out, p.Panels...)
			continue
		}
		out = append(out, p)
	}
	return out
}

// Dashboards reads every dashboard of dashboards/.
func Dashboards() ([]Dashboard, error) {
	names, err := fs.Glob(files, "dashboards/*.json")
	if err != nil {
		return nil, err
	}
	var out []Dashboard
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			return nil, err
		}
		var d Dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("mixin: %s: %w", n, err)
		}
		d.File = path.Base(n)
		out = append(out, d)
	}
	return out, nil
}

// Substitute replaces Grafana variables ($name, ${name}, ${name:format},
// [[name]]) in s with their values; names without a value are left as
// they are. The formats used here (percentencode, queryparam) are applied.
func Substitute(s string, vars map[string]string) string {
	return varRE.ReplaceAllStringFunc(s, func(m string) string {
		sm := varRE.FindStringSubmatch(m)
		name, format := sm[1]+sm[2]+sm[4], sm[3]
		v, ok := vars[name]
		if !ok {
			return m
		}
		switch format {
		case "percentencode":
			return percentEncode(v)
		case "queryparam":
			return "var-" + name + "=" + percentEncode(v)
		}
		return v
	})
}

// varRE matches $name (1), ${name} or ${name:format} (2, 3) and [[name]] (4).
var varRE = regexp.MustCompile(`\$([A-Za-z_][A-Za-z0-9_]*)|\$\{([A-Za-z_][A-Za-z0-9_.]*)(?::([a-z]+))?\}|\[\[([A-Za-z_][A-Za-z0-9_]*)\]\]`)

func percentEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.~", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// Names are the metric and label names a PromQL expression refers to.
type Names struct {
	// Metrics are the metric names of its selectors.
	Metrics []string
	// Matchers maps each metric to the label names its selectors match on.
	Matchers map[string][]string
	// Grouping are the label names of by, without, on, ignoring,
	// group_left and group_right clauses.
	Grouping []string
	// Made are label names the expression creates (count_values,
	// label_replace, label_join).
	Made []string
}

// keywords are PromQL words that are neither metrics nor functions.
var keywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"inf": true, "nan": true, "Inf": true, "NaN": true,
}

var grouping = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

type token struct {
	kind byte // 'i' identifier, 's' string, 'n' number or duration, 'p' punctuation or operator
	text string
}

func lex(q string) ([]token, error) {
	var out []token
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(q) && q[j] != c {
				if q[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(q) {
				return nil, fmt.Errorf("mixin: unterminated string at offset %d in %q", i, q)
			}
			out = append(out, token{'s', q[i+1 : j]})
			i = j + 1
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(q) && q[i+1] >= '0' && q[i+1] <= '9':
			j := i
			for j < len(q) && (isIdent(q[j]) || q[j] == '.') {
				j++
			}
			out = append(out, token{'n', q[i:j]})
			i = j
		case isIdent(c) || c == ':':
			j := i
			for j < len(q) && (isIdent(q[j]) || q[j] == ':') {
				j++
			}
			out = append(out, token{'i', q[i:j]})
			i = j
		case c == '$':
			return nil, fmt.Errorf("mixin: unsubstituted variable at offset %d in %q", i, q)
		default:
			j := i + 1
			if j < len(q) && strings.ContainsRune("=~!<>", rune(c)) && strings.ContainsRune("=~", rune(q[j])) {
				j++
			}
			out = append(out, token{'p', q[i:j]})
			i = j
		}
	}
	return out, nil
}

func isIdent(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

// Refs returns the names a PromQL expression refers to. It reads tokens,
// not a syntax tree: enough for the queries of these dashboards and rules,
// and an error for what it does not understand.
func Refs(q string) (Names, error) {
	toks, err := lex(q)
	if err != nil {
		return Names{}, err
	}
	n := Names{Matchers: map[string][]string{}}
	add := func(list *[]string, s string) {
		if !slices.Contains(*list, s) {
			*list = append(*list, s)
		}
	}
	depth := 0 // of [ ]
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		next := func(k int) token {
			if i+k < len(toks) {
				return toks[i+k]
			}
			return token{}
		}
		switch {
		case t.kind == 'p' && t.text == "[":
			depth++
		case t.kind == 'p' && t.text == "]":
			depth--
		case depth > 0:
		case t.kind == 'i' && grouping[t.text] && next(1).text == "(":
			j := i + 2
			for ; j < len(toks) && toks[j].text != ")"; j++ {
				if toks[j].kind == 'i' {
					add(&n.Grouping, toks[j].text)
				} else if toks[j].text != "," {
					return n, fmt.Errorf("mixin: %s (...) holds %q in %q", t.text, toks[j].text, q)
				}
			}
			i = j
		case t.kind == 'i' && (t.text == "count_values") && next(1).text == "(" && next(2).kind == 's':
			add(&n.Made, next(2).text)
		case t.kind == 'i' && (t.text == "label_replace" || t.text == "label_join"):
			// label_replace(v, "dst", "replacement", "src", "regex")
			depthP, args := 0, 0
		args:
			for j := i + 1; j < len(toks); j++ {
				switch toks[j].text {
				case "(":
					depthP++
				case ")":
					depthP--
				case ",":
					if depthP == 1 {
						args++
						if args == 1 && j+1 < len(toks) && toks[j+1].kind == 's' {
							add(&n.Made, toks[j+1].text)
						}
					}
				}
				if depthP == 0 {
					break args
				}
			}
		case t.kind == 'i' && (next(1).text == "(" || next(1).text == "by" || next(1).text == "without"):
			// a function, or an aggregation with its grouping first
		case t.kind == 'i' && keywords[t.text]:
			if t.text == "offset" {
				i++
			}
		case t.kind == 'i':
			add(&n.Metrics, t.text)
			if next(1).text == "{" {
				j := i + 2
				for ; j < len(toks) && toks[j].text != "}"; j++ {
					if toks[j].kind == 'i' && j+2 < len(toks) && toks[j+1].kind == 'p' && toks[j+2].kind == 's' {
						l := n.Matchers[t.text]
						add(&l, toks[j].text)
						n.Matchers[t.text] = l
						j += 2
					} else if toks[j].text != "," {
						return n, fmt.Errorf("mixin: selector of %s holds %q in %q", t.text, toks[j].text, q)
					}
				}
				i = j
			}
		case t.kind == 'p' && t.text == "{":
			return n, fmt.Errorf("mixin: selector without a metric name in %q", q)
		}
	}
	if depth != 0 {
		return n, fmt.Errorf("mixin: unbalanced [ ] in %q", q)
	}
	sort.Strings(n.Metrics)
	return n, nil
}

// LegendLabels are the label names a legend format refers to ({{name}}).
func LegendLabels(format string) []string {
	var out []string
	for _, m := range legendRE.FindAllStringSubmatch(format, -1) {
		out = append(out, m[1])
	}
	return out
}

var legendRE = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// LabelValuesQuery splits a Grafana variable query label_values(selector,
// label) (or label_values(label)) into its parts.
func LabelValuesQuery(q string) (selector, label string, err error) {
	m := labelValuesRE.FindStringSubmatch(strings.TrimSpace(q))
	if m == nil {
		return "", "", fmt.Errorf("mixin: variable query %q is not label_values(...)", q)
	}
	if m[2] == "" {
		return "", m[1], nil
	}
	return m[1], m[2], nil
}

var labelValuesRE = regexp.MustCompile(`^label_values\(\s*(.*?)\s*(?:,\s*([A-Za-z_][A-Za-z0-9_]*)\s*)?\)$`)

package offline

import (
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// checkYAML checks a budget's YAML against the type it decodes into (t):
// every key known, every value of the kind that key takes. An error names
// the line, where in the budget (total, classes[0], heap.classes[1]) and,
// for an unknown key, the keys valid there, never a Go type.
func checkYAML(n *yaml.Node, t reflect.Type, where string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		names, types := yamlKeys(t)
		if n.Kind != yaml.MappingNode {
			return fmt.Errorf("line %d: %s must be a mapping with the keys %s", n.Line, place(where), strings.Join(names, ", "))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			ft, ok := types[k.Value]
			if !ok {
				return fmt.Errorf("line %d: unknown key %q in %s; valid keys: %s", k.Line, k.Value, place(where), strings.Join(names, ", "))
			}
			if err := checkYAML(v, ft, strings.TrimPrefix(where+"."+k.Value, ".")); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return fmt.Errorf("line %d: %s must be a list of rules (- match: …)", n.Line, where)
		}
		for i, c := range n.Content {
			if err := checkYAML(c, t.Elem(), fmt.Sprintf("%s[%d]", where, i)); err != nil {
				return err
			}
		}
	default:
		if n.Kind != yaml.ScalarNode || n.Decode(reflect.New(t).Interface()) != nil {
			return fmt.Errorf("line %d: %s must be %s, not %s", n.Line, where, kindName(t), shown(n))
		}
	}
	return nil
}

// place names where a mapping is, for messages.
func place(where string) string {
	if where == "" {
		return "the budget's top level"
	}
	return where
}

// shown quotes a node's value, or names its kind when it is not a scalar.
func shown(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("%q", n.Value)
}

// kindName says what a scalar of type t must be.
func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Uint64, reflect.Uint32, reflect.Uint, reflect.Int, reflect.Int64:
		return "a whole number of 0 or more"
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.Bool:
		return "true or false"
	}
	return "a string"
}

// yamlKeys returns the YAML keys of struct t in order (inline fields'
// keys in their place) and the type each takes.
func yamlKeys(t reflect.Type) ([]string, map[string]reflect.Type) {
	var names []string
	types := map[string]reflect.Type{}
	for f := range t.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case !f.IsExported() || name == "-":
		case opts == "inline":
			n, ty := yamlKeys(f.Type)
			names = append(names, n...)
			for k, v := range ty {
				types[k] = v
			}
		case name != "":
			names = append(names, name)
			types[name] = f.Type
		}
	}
	return names, types
}

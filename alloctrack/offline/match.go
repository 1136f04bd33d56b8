package offline

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
)

// NameMatcher matches names by the one rule every name filter follows
// (--class, --frame, a budget's classes:, sites: and heap: rules; see
// docs/offline.md#matching-names): an RE2 regular expression that must
// match a whole name, as Prometheus matches label values and serve
// --package matches apps. A class's name is its dotted name (byte[],
// android.os.Message, java.util.HashMap$Node); a frame's is its method,
// pkg.Class.method, or the frame as shown, pkg.Class.method(File.java:42):
// either, whole.
type NameMatcher struct {
	Expr  string         // as given
	whole *regexp.Regexp // anchored
	loose *regexp.Regexp // the same, unanchored: for suggestions
}

// CompileName compiles a name expression. Its error quotes the expression
// as given, with the reason in words.
func CompileName(expr string) (*NameMatcher, error) {
	whole, err := regexp.Compile("^(?:" + expr + ")$")
	if err != nil {
		why := err.Error()
		if se, ok := errors.AsType[*syntax.Error](err); ok {
			// Its own text quotes the anchored form compiled.
			why = se.Code.String()
		}
		return nil, fmt.Errorf("%s is not a regular expression: %s", asTyped(expr), why)
	}
	return &NameMatcher{Expr: expr, whole: whole, loose: regexp.MustCompile(expr)}, nil
}

// Class tells whether m matches a class name.
func (m *NameMatcher) Class(name string) bool { return m.whole.MatchString(name) }

// Frame tells whether m matches a frame: its method (the text before the
// first '(') or the frame as shown, whole.
func (m *NameMatcher) Frame(frame string) bool {
	fn, _, _ := strings.Cut(frame, "(")
	return m.whole.MatchString(fn) || (fn != frame && m.whole.MatchString(frame))
}

// AnyFrame tells whether m matches one of frames.
func (m *NameMatcher) AnyFrame(frames []string) bool {
	return slices.ContainsFunc(frames, m.Frame)
}

// near returns up to three of names that the expression matches somewhere
// but not whole: what its author may have meant.
func (m *NameMatcher) near(names []string) []string {
	var out []string
	for _, n := range names {
		if len(out) == 3 {
			break
		}
		if m.loose.MatchString(n) && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// Test tells whether m matches a test: its name as the runner gives it,
// method(pkg.Class), or pkg.Class.method, whole.
func (m *NameMatcher) Test(name, class, method string) bool {
	return m.whole.MatchString(name) || (class != "" && method != "" && m.whole.MatchString(class+"."+method))
}

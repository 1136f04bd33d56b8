package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDidYouMean: a mistyped command or long flag gets the nearest real
// ones (the command's flags and the global ones); one near nothing gets
// no guess.
func TestDidYouMean(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" for no suggestion
	}{
		{[]string{"reprot", "x"}, `got "reprot"; did you mean report?`},
		{[]string{"serv"}, `got "serv"; did you mean serve?`},
		{[]string{"hepadump"}, `did you mean heapdump?`},
		{[]string{"report", "--tpo", "3", "x"}, `'--tpo'; did you mean --top?`},
		{[]string{"capture", "--duraton", "3s"}, `did you mean --duration?`},
		{[]string{"serve", "--web.listen", ":1"}, `did you mean --web.listen-address?`},
		{[]string{"serve", "--log.levle", "info"}, `did you mean --log.level?`},
		{[]string{"serve", "--heapdump", "d"}, `did you mean --heapdump.dir or --heapdump.no-auth or --heapdump.timeout?`},
		{[]string{"report", "--verzion"}, `did you mean --version?`},
		{[]string{"zzz"}, ""},
		{[]string{"report", "--frobnicate", "x"}, ""},
		{[]string{"report", "--heapdump", "x"}, ""}, // serve's flag, not report's
	} {
		_, stderr, code := runCmd(t, tc.args...)
		if code != exitUsage {
			t.Errorf("%q: exit %d", tc.args, code)
		}
		if tc.want == "" && strings.Contains(stderr, "did you mean") || tc.want != "" && !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: %q, want %q", tc.args, stderr, tc.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"top", "top", 0}, {"tpo", "top", 1}, {"", "abc", 3}, {"kitten", "sitting", 3}, {"serv", "serve", 1}, {"abc", "ca", 3}} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestOutIsO: -o is --out in every command that writes somewhere, and
// report's old --output still works.
func TestOutIsO(t *testing.T) {
	for _, cmd := range []string{"report", "capture", "heapdump"} {
		_, stderr, _ := runCmd(t, cmd, "--help")
		if !strings.Contains(stderr, "-o, --out=") {
			t.Errorf("%s --help: no -o, --out", cmd)
		}
		if strings.Contains(stderr, "--output") {
			t.Errorf("%s --help shows --output", cmd)
		}
	}
	dir := t.TempDir()
	for _, flag := range []string{"-o", "--out", "--output"} {
		out := filepath.Join(dir, strings.TrimLeft(flag, "-")+".txt")
		if _, errOut, code := runCmd(t, "report", flag, out, realReport); code != exitOK {
			t.Fatalf("report %s: exit %d %s", flag, code, errOut)
		}
		if b, _ := os.ReadFile(out); !strings.Contains(string(b), "allocations 5000") {
			t.Errorf("report %s wrote %q", flag, b)
		}
	}
}

package archtest

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// factRow matches the first cell of a numbered fact row: "| 12 | …".
var factRow = regexp.MustCompile(`^\|\s*([^|\s]+)\s*\|`)

// TestDeviceFactsNumberedInOrder fails when a docs/*-devices.md table numbers
// its facts other than 1, 2, 3, … in the order they appear, or breaks its
// table with a blank line: code, tests and docs cite the facts by number.
func TestDeviceFactsNumberedInOrder(t *testing.T) {
	docs, err := filepath.Glob("../../docs/*-devices.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*-devices.md found (%v)", err)
	}
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		checkFactNumbers(t, filepath.Base(doc), strings.Split(string(b), "\n"))
	}
}

func checkFactNumbers(t *testing.T, name string, lines []string) {
	t.Helper()
	want, inTable := 1, false
	for i, line := range lines {
		m := factRow.FindStringSubmatch(line)
		if m == nil {
			if inTable && strings.TrimSpace(line) == "" && i+1 < len(lines) && factRow.MatchString(lines[i+1]) {
				t.Errorf("%s:%d: a blank line splits the facts table", name, i+1)
			}
			inTable = strings.HasPrefix(line, "|")
			continue
		}
		inTable = true
		if m[1][0] < '0' || m[1][0] > '9' {
			continue // a header row or the |---| separator
		}
		if m[1] != strconv.Itoa(want) {
			t.Errorf("%s:%d: fact numbered %q, want %d (facts are numbered in order)", name, i+1, m[1], want)
		}
		want++
	}
}

package offline_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
)

// TestMixedRuns: a multi-run diff's runs must share device and app within
// a side, and device and app (not the app version) across the sides; a
// run with no summary.json is not checked.
func TestMixedRuns(t *testing.T) {
	newer := pixel
	newer.AppVersion, newer.AppVersionCode = "1.5", 15
	other := pixel
	other.Model = "Pixel 8"
	bare := t.TempDir()
	a, b := fakeRun(t, pixel, "a"), fakeRun(t, pixel, "b")
	n1, n2 := fakeRun(t, newer, "n1"), fakeRun(t, newer, "n2")
	for _, tc := range []struct {
		name      string
		base, new []string
		want      []string // substrings, one per problem
	}{
		{"same device, new version", []string{a, b}, []string{n1, n2}, nil},
		{"tests.json paths", []string{filepath.Join(a, offline.TestsFile)}, []string{filepath.Join(n1, offline.TestsFile)}, nil},
		{"bare runs", []string{bare}, []string{n1}, nil},
		{"versions mixed in a side", []string{a, n1}, []string{n2}, []string{"base run " + n1, "app version 1.4 ≠ 1.5"}},
		{"another device", []string{a}, []string{fakeRun(t, other, "o")}, []string{"not of the base's device", "device model Pixel 7 ≠ Pixel 8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := offline.MixedRuns(tc.base, tc.new)
			if len(got) != min(len(tc.want), 1) {
				t.Fatalf("got %q, want %d problem(s)", got, min(len(tc.want), 1))
			}
			for _, w := range tc.want {
				if !strings.Contains(strings.Join(got, "\n"), w) {
					t.Errorf("%q does not say %q", got, w)
				}
			}
		})
	}
}

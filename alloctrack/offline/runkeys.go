package offline

import (
	"fmt"
	"os"
	"path/filepath"
)

// runDir is the directory whose summary.json describes the run at path:
// path itself, or the directory of a file such as tests.json.
func runDir(path string) string {
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		return filepath.Dir(path)
	}
	return path
}

// MixedRuns says why runs of a multi-run diff are not comparable, nil if
// they are: within a side every run must be of one device model, API
// level, app and app version; across the sides the device model, API
// level and app must agree (the app version is what a diff compares).
// A run with no summary.json (a bare report, trace or log) records none
// of it and is not checked.
func MixedRuns(base, nw []string) []string {
	var out []string
	first := [2]*BaselineKey{}
	for side, paths := range [][]string{base, nw} {
		name := []string{"base", "new"}[side]
		for _, p := range paths {
			k, err := recordedKey(runDir(p))
			if err != nil {
				continue
			}
			if first[side] == nil {
				first[side] = &k
				continue
			}
			if d := first[side].Differs(k); len(d) > 0 {
				out = append(out, fmt.Sprintf("%s run %s is not of the side's first run (%s): %v", name, p, first[side], d))
			}
		}
	}
	if first[0] != nil && first[1] != nil {
		a, b := *first[0], *first[1]
		a.AppVersion, a.AppVersionCode, b.AppVersion, b.AppVersionCode = "", 0, "", 0
		if d := a.Differs(b); len(d) > 0 {
			out = append(out, fmt.Sprintf("the new runs (%s) are not of the base's device or app (%s): %v", first[1], first[0], d))
		}
	}
	return out
}

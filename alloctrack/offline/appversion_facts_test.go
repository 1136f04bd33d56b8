package offline_test

import (
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
)

// TestParseDumpsysVersionNameLine: Settings.dumpPackageLPr prints
// versionName with println, so the name is the whole rest of its line,
// spaces and all, and "null" for a manifest without one; versionCode
// shares its line with minSdk and targetSdk (docs/gates.md).
func TestParseDumpsysVersionNameLine(t *testing.T) {
	for _, c := range []struct {
		out, name string
		code      int64
	}{
		{"    versionCode=7 minSdk=21 targetSdk=33\n    versionName=2.0 beta (rc 1)\n", "2.0 beta (rc 1)", 7},
		{"    versionCode=7 minSdk=21 targetSdk=33\r\n    versionName=2.0 beta\r\n", "2.0 beta", 7},
		{"    versionCode=8 minSdk=21 targetSdk=33\n    versionName=null\n", "", 8},
		{"    versionCode=4294967305 minSdk=21 targetSdk=33\n    versionName=x\n", "x", 1<<32 | 9}, // versionCodeMajor 1
	} {
		name, code, err := offline.ParseDumpsysVersion("com.example", []byte(c.out))
		if err != nil || name != c.name || code != c.code {
			t.Errorf("%q: %q %d %v; want %q %d", c.out, name, code, err, c.name, c.code)
		}
	}
}

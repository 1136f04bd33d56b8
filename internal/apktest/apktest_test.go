package apktest_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/internal/apktest"
	"github.com/alloctrack/alloctrack/internal/realtest"
)

// TestAaptReadsTheAPK has Android's aapt (Debian package aapt) read the
// APKs this package writes: `aapt dump badging` must name the package,
// versionCode and versionName, and `aapt dump xmltree` each attribute with
// its resource id, so the fixtures are what Android's own tool reads.
func TestAaptReadsTheAPK(t *testing.T) {
	aapt := realtest.Program(t, "aapt", "aapt")
	for _, m := range []apktest.Manifest{
		{Package: "com.example.app1", VersionCode: 42, VersionName: "1.4.2"},
		{Package: "org.example.long_name.app", VersionCode: 2147483647, VersionName: "2.0-beta (build 7)"},
		{Package: "com.example.app2", VersionCode: 7, VersionName: "3.1 «é»", VersionCodeMajor: 3},
		{Package: "com.example.app3", VersionCode: 1, VersionName: strings.Repeat("é", 40000)}, // a length of two units
	} {
		p := apktest.Write(t, "app.apk", m)
		out, err := exec.Command(aapt, "dump", "badging", p).CombinedOutput()
		if err != nil {
			t.Fatalf("aapt dump badging %v: %v\n%s", m, err, out)
		}
		want := fmt.Sprintf("package: name='%s' versionCode='%d' versionName='%s'", m.Package, m.VersionCode, m.VersionName)
		if first, _, _ := strings.Cut(string(out), "\n"); !strings.HasPrefix(first, want) {
			t.Errorf("aapt dump badging said\n%.200s\nwant %.200s", first, want)
		}
		out, err = exec.Command(aapt, "dump", "xmltree", p, "AndroidManifest.xml").CombinedOutput()
		if err != nil {
			t.Fatalf("aapt dump xmltree %v: %v\n%s", m, err, out)
		}
		wantAttrs := []string{"N: android=" + apktest.AndroidNS, "E: manifest",
			fmt.Sprintf("A: android:versionCode(0x%08x)=(type 0x10)0x%x", apktest.AttrVersionCode, m.VersionCode),
			fmt.Sprintf("A: android:versionName(0x%08x)=\"%s\"", apktest.AttrVersionName, m.VersionName),
			fmt.Sprintf("A: package=\"%s\"", m.Package)}
		if m.VersionCodeMajor != 0 {
			wantAttrs = append(wantAttrs, fmt.Sprintf("A: android:versionCodeMajor(0x%08x)=(type 0x10)0x%x", apktest.AttrVersionCodeMajor, m.VersionCodeMajor))
		}
		for _, w := range wantAttrs {
			if !strings.Contains(string(out), w) {
				t.Errorf("aapt dump xmltree has no %.200q:\n%.2000s", w, out)
			}
		}
	}
}

package offline_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/alloctrack/offline"
	"github.com/alloctrack/alloctrack/internal/apktest"
)

// appBuild writes an APK of com.example version name (code) and reads it.
func appBuild(t *testing.T, name string, code uint32) offline.AppBuild {
	t.Helper()
	b, err := offline.ReadAppBuild(apktest.Write(t, "app.apk", apktest.Manifest{Package: "com.example", VersionName: name, VersionCode: code}))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBaselineKeyFromAPK: with an APK, a run is keyed by the APK's
// version; a run that recorded no version takes the APK's, one that
// recorded the same is accepted, and one of another version or app is
// refused naming both.
func TestBaselineKeyFromAPK(t *testing.T) {
	store := t.TempDir()
	build := appBuild(t, "1.5", 15)
	unknown := pixel
	unknown.AppVersion, unknown.AppVersionCode = "", 0
	same := pixel
	same.AppVersion, same.AppVersionCode = "1.5", 15
	for i, m := range []offline.CaptureMeta{unknown, same} {
		if _, _, err := offline.AddBaselineAPK(store, 5, fakeRun(t, m, string(rune('a'+i))), build); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	key := offline.BaselineKey{Model: "Pixel 7", API: 33, Package: "com.example", AppVersion: "1.5", AppVersionCode: 15}
	if runs, err := offline.BaselineFor(store, key); err != nil || markers(t, runs) != "a,b" {
		t.Errorf("1.5's baseline %v, %v; want a,b", runs, err)
	}
	other := pixel
	other.Package = "com.example.test"
	for _, c := range []struct {
		m    offline.CaptureMeta
		want string
	}{
		{pixel, "app version 1.4 ≠ 1.5, app version code 14 ≠ 15"},
		{other, "app com.example.test ≠ com.example"},
	} {
		run := fakeRun(t, c.m, "x")
		_, _, err := offline.AddBaselineAPK(store, 5, run, build)
		if !errors.Is(err, offline.ErrBaselineMismatch) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), build.Path) {
			t.Errorf("%s: err %v; want ErrBaselineMismatch naming %q and the APK", c.m.Package, err, c.want)
		}
	}
	if runs, _ := offline.BaselineFor(store, key); len(runs) != 2 {
		t.Errorf("the refused runs went in: %v", runs)
	}
}

// TestDumpsysNullVersionName: an app whose manifest has no versionName is
// dumped as versionName=null [inf]; that is no name, as in its APK, so the
// two agree.
func TestDumpsysNullVersionName(t *testing.T) {
	out := "  Package [com.example] (5c3a1f2):\n    versionCode=3 minSdk=21 targetSdk=33\n    versionName=null\n"
	name, code, err := offline.ParseDumpsysVersion("com.example", []byte(out))
	if err != nil || name != "" || code != 3 {
		t.Fatalf("%q %d %v; want no name, code 3", name, code, err)
	}
	if d := appBuild(t, "", 3).Differs("com.example", name, code); d != nil {
		t.Errorf("the APK without a versionName differs: %v", d)
	}
}

package apk_test

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alloctrack/alloctrack/apk"
	"github.com/alloctrack/alloctrack/internal/apktest"
)

// TestReadVersion reads the version of APKs that aapt reads the same
// (internal/apktest): versionCodeMajor goes into the high 32 bits.
func TestReadVersion(t *testing.T) {
	for _, c := range []struct {
		m    apktest.Manifest
		want apk.Version
	}{
		{apktest.Manifest{Package: "com.example.app1", VersionCode: 42, VersionName: "1.4.2"}, apk.Version{Package: "com.example.app1", Name: "1.4.2", Code: 42}},
		{apktest.Manifest{Package: "com.example.app2", VersionCode: 4294967295, VersionName: "3.1 «é»"}, apk.Version{Package: "com.example.app2", Name: "3.1 «é»", Code: 4294967295}},
		{apktest.Manifest{Package: "com.example.app3", VersionCode: 7, VersionName: "2", VersionCodeMajor: 3}, apk.Version{Package: "com.example.app3", Name: "2", Code: 3<<32 | 7}},
		{apktest.Manifest{Package: "com.example.app4", VersionCode: 9}, apk.Version{Package: "com.example.app4", Code: 9}},
		{apktest.Manifest{Package: "com.example.app5", VersionCode: 1, VersionName: strings.Repeat("é", 40000)}, apk.Version{Package: "com.example.app5", Name: strings.Repeat("é", 40000), Code: 1}},
	} {
		got, err := apk.ReadVersion(apktest.Write(t, "app.apk", c.m))
		if err != nil || got != c.want {
			t.Errorf("%+v: got %+v, %v; want %+v", c.m, got, err, c.want)
		}
	}
}

// TestReadVersionRejects: a file that is no APK, or whose manifest is
// missing or corrupt, is an *apk.Error naming the file and what was wrong.
func TestReadVersionRejects(t *testing.T) {
	good := apktest.ManifestXML(apktest.Manifest{Package: "com.example.app1", VersionCode: 42, VersionName: "1.4.2"})
	put := func(b []byte, off int, v uint32) []byte {
		b = append([]byte(nil), b...)
		binary.LittleEndian.PutUint32(b[off:], v)
		return b
	}
	pool := 8 // the string pool follows the file's header
	for _, c := range []struct {
		name string
		file []byte
		want string
	}{
		{"not a zip", []byte("PK? no, a text file\n"), "not an APK (a zip archive)"},
		{"no manifest", apktest.Zip([]byte("classes.dex"), []byte("dex\n035")), "AndroidManifest.xml: the archive holds none"},
		{"empty manifest", apktest.Zip([]byte(apk.ManifestName), nil), "not binary XML"},
		{"text manifest", apktest.Zip([]byte(apk.ManifestName), []byte(`<manifest package="a"/>`)), "not binary XML"},
		{"cut manifest", apktest.Zip([]byte(apk.ManifestName), good[:len(good)/2]), "in a file of"},
		{"no element", apktest.Zip([]byte(apk.ManifestName), apktest.StringPool([]string{"a"})), "not binary XML"},
		{"4G strings", apktest.Zip([]byte(apk.ManifestName), put(good, pool+8, 0xffffffff)), "declares 4294967295 strings"},
		{"string past the pool", apktest.Zip([]byte(apk.ManifestName), put(good, pool+28, 0x7fff0000)), "runs past the pool"},
		{"1 MiB versionName", apktest.APK(apktest.Manifest{Package: "com.example.app1", VersionCode: 1, VersionName: strings.Repeat("x", 600000)}), "names 1200"},
		{"no package", apktest.APK(apktest.Manifest{VersionCode: 1, VersionName: "1"}), "names no package"},
		{"no version", apktest.APK(apktest.Manifest{Package: "com.example.app1"}), "no android:versionCode or android:versionName"},
	} {
		p := filepath.Join(t.TempDir(), "my.apk")
		if err := os.WriteFile(p, c.file, 0o644); err != nil {
			t.Fatal(err)
		}
		v, err := apk.ReadVersion(p)
		var ae *apk.Error
		if !errors.As(err, &ae) || ae.Path != p || !strings.Contains(err.Error(), p+": ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %+v, %v; want an *apk.Error naming %s and %q", c.name, v, err, p, c.want)
		}
	}
	if _, err := apk.ReadVersion(filepath.Join(t.TempDir(), "missing.apk")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v, want one that is os.ErrNotExist", err)
	}
}

package apk_test

import (
	"testing"

	"github.com/alloctrack/alloctrack/apk"
	"github.com/alloctrack/alloctrack/internal/apktest"
)

// FuzzManifestVersion: no manifest, however corrupt, panics the reader or
// makes it allocate more than the manifest holds (the fuzzer's memory
// limit catches that); what it reads from the fixtures is what they say.
func FuzzManifestVersion(f *testing.F) {
	ms := []apktest.Manifest{
		{Package: "com.example.app1", VersionCode: 42, VersionName: "1.4.2"},
		{Package: "com.example.app3", VersionCode: 7, VersionName: "2 «é»", VersionCodeMajor: 3},
	}
	for _, m := range ms {
		f.Add(apktest.ManifestXML(m))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := apk.ManifestVersion(b)
		if err == nil && v.Package == "" {
			t.Errorf("no error and no package: %+v", v)
		}
	})
}

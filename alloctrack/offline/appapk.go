package offline

import (
	"fmt"
	"strings"

	"github.com/alloctrack/alloctrack/apk"
)

// AppVersionSourceAPK is how a capture says its app's version came from
// the APK file CaptureMeta.APK names; AppVersionSourceAPKDevice, that the
// device's `dumpsys package` said the same.
const (
	AppVersionSourceAPK       = "apk"
	AppVersionSourceAPKDevice = "apk, dumpsys package"
)

// AppBuild is an APK file and what its manifest says.
type AppBuild struct {
	Path string
	apk.Version
}

// ReadAppBuild reads the version of the APK file at path.
func ReadAppBuild(path string) (AppBuild, error) {
	v, err := apk.ReadVersion(path)
	return AppBuild{Path: path, Version: v}, err
}

// Key is k with the build's app and version.
func (b AppBuild) Key(k BaselineKey) BaselineKey {
	k.Package, k.AppVersion, k.AppVersionCode = b.Package, b.Name, b.Code
	return k
}

// Differs names where the app pkg, of version name and code, is not the
// build's ("app version 1.4 ≠ 1.5"); a version of "" and 0 (unknown) is
// not compared.
func (b AppBuild) Differs(pkg, name string, code int64) []string {
	k := BaselineKey{Package: pkg, AppVersion: name, AppVersionCode: code}
	if name == "" && code == 0 {
		k.AppVersion, k.AppVersionCode = b.Name, b.Code
	}
	return k.Differs(b.Key(BaselineKey{}))
}

// RunKeyAPK is a run's key with the app's version from build: the run
// must be of the build's package, and a version it records must be the
// build's, or the error wraps ErrBaselineMismatch.
func RunKeyAPK(run string, build AppBuild) (BaselineKey, error) {
	k, err := recordedKey(run)
	if err != nil {
		return k, err
	}
	if k.Package != "" {
		if d := build.Differs(k.Package, k.AppVersion, k.AppVersionCode); d != nil {
			return k, fmt.Errorf("%w: %w: %s is a run of %s %s, not of the APK %s (%s)", ErrBaseline, ErrBaselineMismatch,
				run, k.Package, CaptureMeta{AppVersion: k.AppVersion, AppVersionCode: k.AppVersionCode}.AppVersionString(), build.Path, strings.Join(d, ", "))
		}
		k = build.Key(k)
	}
	return k, completeKey(run, k)
}

// AddBaselineAPK is AddBaseline with the run's key from RunKeyAPK.
func AddBaselineAPK(store string, keep int, run string, build AppBuild) (added string, pruned []string, err error) {
	k, err := RunKeyAPK(run, build)
	if err != nil {
		return "", nil, err
	}
	return addBaseline(store, keep, run, k)
}

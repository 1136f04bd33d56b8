package sim

import (
	"fmt"
	"strings"
)

// AppVersion is what an installed app's manifest says of its build:
// android:versionName and android:versionCode.
type AppVersion struct {
	Name string
	Code int64
}

// DefaultAppVersion is the version of an app the simulator runs without
// one set (SetAppVersion).
var DefaultAppVersion = AppVersion{Name: "1.0", Code: 1}

// SetAppVersion installs a build of pkg with version v: dumpsys package
// reports it from then on, as after adb install of a new APK.
func (d *Device) SetAppVersion(pkg string, v AppVersion) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.versions == nil {
		d.versions = map[string]AppVersion{}
	}
	d.versions[pkg] = v
}

// appVersion is pkg's installed version; ok is false when pkg is not
// installed (no version set, no process of it, no suite targets it).
func (d *Device) appVersion(pkg string) (v AppVersion, ok bool) {
	d.mu.Lock()
	v, ok = d.versions[pkg]
	d.mu.Unlock()
	if ok {
		return v, true
	}
	for _, vm := range d.VMs() {
		if vm.cfg.Package == pkg {
			return DefaultAppVersion, true
		}
	}
	for _, s := range d.Suites() {
		if s.Target == pkg || s.TestPackage == pkg {
			return DefaultAppVersion, true
		}
	}
	return AppVersion{}, false
}

// dumpsysCommand answers dumpsys package PKG with the lines of its
// Packages: section that name the version (docs/gates.md): an indented
// versionCode=N minSdk=… targetSdk=… line and a versionName=S line, S the
// whole rest of the line, "null" for a manifest without one
// (docs/gates.md). Other services and forms are not simulated.
func (d *Device) dumpsysCommand(argv []string) (out, errOut []byte, code int) {
	if len(argv) != 3 || argv[1] != "package" {
		return nil, []byte("sim: dumpsys: only dumpsys package PKG\n"), 1
	}
	pkg := argv[2]
	v, ok := d.appVersion(pkg)
	if !ok {
		return []byte("Unable to find package: " + pkg + "\n"), nil, 0
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Packages:\n  Package [%s] (5c3a1f2):\n    userId=10123\n", pkg)
	name := v.Name
	if name == "" {
		name = "null" // PrintWriter.println of a null String
	}
	fmt.Fprintf(&b, "    versionCode=%d minSdk=21 targetSdk=%d\n    versionName=%s\n", v.Code, d.cfg.API, name)
	fmt.Fprintf(&b, "    flags=[ DEBUGGABLE HAS_CODE ALLOW_CLEAR_USER_DATA ]\n")
	return []byte(b.String()), nil, 0
}
